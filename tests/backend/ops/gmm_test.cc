// Conformance cases (op_conformance.h): the grouped matmuls, forward, dlhs and drhs, on a
// routing, with row maps and weight windows, over many groups, and group sizes that do not add
// up.
#include <numeric>

#include "op_conformance.h"
#include "test_util.h"

namespace gemmax::conformance {

namespace {

// The three products on whole weights, rows in sorted order.
struct Gmm {
  Tensor lhs, rhs, group_sizes, out, dout, dlhs, drhs;
};
void plain_gmm(Backend& be, const Gmm& t) {
  be.gmm({.out = t.out, .lhs = t.lhs, .rhs = t.rhs, .group_sizes = t.group_sizes});
  be.gmm_dlhs({.dlhs = t.dlhs, .dout = t.dout, .rhs = t.rhs, .group_sizes = t.group_sizes});
  be.gmm_drhs({.drhs = t.drhs, .lhs = t.lhs, .dout = t.dout, .group_sizes = t.group_sizes});
}

}  // namespace

// One MoE layer's products on a real routing (an expert with no rows): plain, with the permute
// folded into the row loads (gathered from the tokens), on the gate and up halves of a fused
// weight, accumulating; the second matmul writing back in token order and its backward reading
// from there. The expert with no rows gets no weight gradient.
CONFORMANCE_CASE(GroupedMatmulsOnARouting) {
  const RoutedSize z{23, 3, 6, {}};
  const int64_t T = z.T, K = z.K, E = z.E, TK = T * K, D = 37, F = 19;
  auto [got, truth] =
      h.run(RouteSort{choices(h, z, false), h.zeros({TK}, DType::I32), h.zeros({TK}, DType::I32),
                      h.zeros({TK}, DType::I32), h.zeros({E}, DType::I32)},
            [&](Backend& be, const RouteSort& t) {
              be.route_sort({.routing = {t.order, t.inverse, t.token, t.group_sizes},
                             .idx = t.idx,
                             .num_experts = E});
            });
  const Tensor order = truth.order, token = truth.token, sizes = truth.group_sizes;
  for (DType dt : h.dtypes()) {
    const std::string d = std::string(dtype_name(dt)) + " ";
    struct Rows {
      const char* what;
      bool gather;
      int64_t begin, rows;
      bool accumulate;
    };
    for (const Rows& c :
         {Rows{"plain", false, 0, -1, false}, Rows{"gathered", true, 0, -1, false},
          Rows{"gate half", true, 0, F, false}, Rows{"up half accumulating", false, F, F, true}}) {
      const int64_t n = c.rows < 0 ? 2 * F : c.rows;
      // lhs: the tokens [T, D] when gathered, else sorted rows [T*K, D].
      struct Ops {
        Tensor lhs, rhs, group_sizes, token, order, out, dout, dlhs, drhs;
      };
      auto [g, w] = h.run(
          Ops{h.rand({c.gather ? T : TK, D}, dt), h.rand({E, 2 * F, D}, dt), sizes, token, order,
              h.rand({TK, n}, dt), h.rand({TK, n}, dt), h.rand({TK, D}, dt), h.rand({E, 2 * F, D})},
          [&](Backend& be, const Ops& t) {
            const GmmRows fwd{c.gather ? t.token : Tensor(), Tensor(), c.begin, c.rows,
                              c.accumulate};
            be.gmm({.out = t.out,
                    .lhs = t.lhs,
                    .rhs = t.rhs,
                    .group_sizes = t.group_sizes,
                    .rows = fwd});
            const GmmRows back{c.gather ? t.order : Tensor(), Tensor(), c.begin, c.rows,
                               c.accumulate};  // dlhs written in token-copy order
            be.gmm_dlhs({.dlhs = t.dlhs,
                         .dout = t.dout,
                         .rhs = t.rhs,
                         .group_sizes = t.group_sizes,
                         .rows = back});
            be.gmm_drhs({.drhs = t.drhs,
                         .lhs = t.lhs,
                         .dout = t.dout,
                         .group_sizes = t.group_sizes,
                         .rows = fwd});
          });
      h.expect_near(d + "gmm " + c.what, g.out, w.out, h.tol(dt));
      h.expect_near(d + "gmm_dlhs " + c.what, g.dlhs, w.dlhs, h.tol(dt));
      h.expect_near(d + "gmm_drhs " + c.what, g.drhs, w.drhs, 1e-5);
    }
    // The second matmul: out written back in token order, its backward reading dout from there.
    struct Scattered {
      Tensor lhs, rhs, group_sizes, order, out, dout, dlhs, drhs;
    };
    auto [g, w] = h.run(
        Scattered{h.rand({TK, F}, dt), h.rand({E, D, F}, dt), sizes, order, h.zeros({TK, D}, dt),
                  h.rand({TK, D}, dt), h.zeros({TK, F}, dt), h.zeros({E, D, F})},
        [&](Backend& be, const Scattered& t) {
          const GmmRows scattered{Tensor(), t.order};
          be.gmm({.out = t.out,
                  .lhs = t.lhs,
                  .rhs = t.rhs,
                  .group_sizes = t.group_sizes,
                  .rows = scattered});
          be.gmm_dlhs({.dlhs = t.dlhs,
                       .dout = t.dout,
                       .rhs = t.rhs,
                       .group_sizes = t.group_sizes,
                       .rows = scattered});
          be.gmm_drhs({.drhs = t.drhs,
                       .lhs = t.lhs,
                       .dout = t.dout,
                       .group_sizes = t.group_sizes,
                       .rows = scattered});
        });
    h.expect_near(d + "gmm scattered", g.out, w.out, h.tol(dt));
    h.expect_near(d + "gmm_dlhs gathered dout", g.dlhs, w.dlhs, h.tol(dt));
    h.expect_near(d + "gmm_drhs gathered dout", g.drhs, w.drhs, 1e-5);
    for (int64_t i = 5 * D * F; i < 6 * D * F; ++i)
      ASSERT_EQ(get_as_double(g.drhs, i), 0.0) << "the expert with no rows got a gradient";
  }
}

// Empty groups, a group over several tiles, lhs rows gathered from repeated tokens and out rows
// scattered through a permutation, the gate and up windows of a fused weight, accumulation, and
// float32 weight gradients of bfloat16 inputs; then the plain layout.
CONFORMANCE_CASE(GroupedMatmulsWithMapsAndWindows) {
  const std::vector<int32_t> sizes = {3, 0, 150, 1, 0, 70};
  const int64_t G = int64_t(sizes.size()), m = 224, k = 72, N = 2 * 40, F = 40, T = 112;
  std::vector<int32_t> token(m), perm(m);
  for (int64_t r = 0; r < m; ++r) token[size_t(r)] = int32_t(h.rng().uniform_int(T));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t r = m - 1; r > 0; --r)
    std::swap(perm[size_t(r)], perm[h.rng().uniform_int(uint64_t(r + 1))]);
  // token: the rows gathered into lhs; perm: the forward's out rows and the backward's dlhs rows.
  struct Mapped {
    Tensor lhs, rhs, group_sizes, token, perm, out, dout, dlhs, drhs;
  };
  struct Drhs {
    Tensor lhs, dout, group_sizes, drhs;
  };
  for (DType dt : h.dtypes()) {
    for (bool up : {false, true})
      for (bool acc : {false, true}) {
        auto [got, truth] = h.run(
            Mapped{h.rand({T, k}, dt), h.rand({G, N, k}, dt), h.ints(sizes), h.ints(token),
                   h.ints(perm), h.rand({m, F}, dt), h.rand({m, F}, dt), h.rand({m, k}, dt),
                   h.rand({G, N, k})},
            [&](Backend& be, const Mapped& t) {
              const int64_t begin = up ? F : 0;
              const GmmRows fwd{t.token, t.perm, begin, F, acc};  // gather lhs, scatter out
              be.gmm({.out = t.out,
                      .lhs = t.lhs,
                      .rhs = t.rhs,
                      .group_sizes = t.group_sizes,
                      .rows = fwd});
              const GmmRows back{t.perm, Tensor(), begin, F, acc};  // dlhs in perm, dout sorted
              be.gmm_dlhs({.dlhs = t.dlhs,
                           .dout = t.dout,
                           .rhs = t.rhs,
                           .group_sizes = t.group_sizes,
                           .rows = back});
              be.gmm_drhs({.drhs = t.drhs,
                           .lhs = t.lhs,
                           .dout = t.dout,
                           .group_sizes = t.group_sizes,
                           .rows = fwd});
            });
        const std::string what = std::string(up ? "up" : "gate") + (acc ? " accumulate" : "");
        h.expect_near("gmm " + what, got.out, truth.out, h.tol(dt));
        h.expect_near("gmm_dlhs " + what, got.dlhs, truth.dlhs, h.tol(dt));
        h.expect_near("gmm_drhs " + what, got.drhs, truth.drhs, 1e-5);
      }
    const Tensor lhs = h.rand({m, k}, dt), rhs = h.rand({G, N, k}, dt), dout = h.rand({m, N}, dt);
    auto [got, truth] = h.run(Gmm{lhs, rhs, h.ints(sizes), h.zeros({m, N}, dt), dout,
                                  h.zeros({m, k}, dt), h.zeros({G, N, k})},
                              plain_gmm);
    h.expect_near("gmm plain", got.out, truth.out, h.tol(dt));
    h.expect_near("gmm_dlhs plain", got.dlhs, truth.dlhs, h.tol(dt));
    h.expect_near("gmm_drhs plain", got.drhs, truth.drhs, 1e-5);
    if (dt == DType::F32) continue;
    // A bfloat16 weight gradient: within the contract (drhs at least as wide as the inputs); a
    // backend that writes only float32 ones says so.
    try {
      auto [g16, t16] = h.run(
          Drhs{lhs, dout, h.ints(sizes), h.zeros({G, N, k}, dt)}, [&](Backend& be, const Drhs& t) {
            be.gmm_drhs(
                {.drhs = t.drhs, .lhs = t.lhs, .dout = t.dout, .group_sizes = t.group_sizes});
          });
      h.expect_near("gmm_drhs plain into bfloat16", g16.drhs, t16.drhs, h.tol(dt));
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("writes float32 weight gradients"), std::string::npos)
          << e.what();
    }
  }
}

// Many groups (a group table scanned by many threads of one block, several groups each).
CONFORMANCE_CASE(GroupedMatmulsOverManyGroups) {
  const int64_t G = 520, k = 16, N = 24;
  std::vector<int32_t> sizes(G, 0);
  for (int64_t g = 0; g < G; g += 7) sizes[size_t(g)] = int32_t(g % 3 + (g % 5 == 0 ? 130 : 0));
  const int64_t m = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  const DType dt = DType::BF16;
  auto [got, truth] =
      h.run(Gmm{h.rand({m, k}, dt), h.rand({G, N, k}, dt), h.ints(sizes), h.zeros({m, N}, dt),
                h.rand({m, N}, dt), h.zeros({m, k}, dt), h.zeros({G, N, k})},
            plain_gmm);
  h.expect_near("gmm", got.out, truth.out, h.tol(dt));
  h.expect_near("gmm_dlhs", got.dlhs, truth.dlhs, h.tol(dt));
  h.expect_near("gmm_drhs", got.drhs, truth.drhs, 1e-5);
}

// Group sizes that do not add up to the rows are an error naming both counts, at the call or at
// the next synchronisation; in float32, and in bfloat16 at sizes the tensor-core kernels take.
CONFORMANCE_CASE(GroupSizesThatDoNotAddUpAreReported) {
  Backend& be = h.be();
  for (const auto& [dt, width] :
       {std::pair{DType::F32, int64_t(4)}, std::pair{DType::BF16, int64_t(8)}}) {
    const Tensor lhs = be.to_device(h.rand({6, width}, dt), MemKind::Workspace);
    const Tensor rhs = be.to_device(h.rand({2, 8, width}, dt), MemKind::Workspace);
    const Tensor sizes = be.to_device(h.ints({2, 3}), MemKind::Workspace);
    Tensor out = be.alloc({6, 8}, dt, MemKind::Workspace);
    testing::expect_error(
        [&] {
          be.gmm({.out = out, .lhs = lhs, .rhs = rhs, .group_sizes = sizes});
          be.to_host(out);
        },
        {"group sizes sum to 5", "6 rows"});
  }
}

}  // namespace gemmax::conformance

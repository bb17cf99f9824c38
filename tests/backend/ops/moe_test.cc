// Conformance cases (op_conformance.h): the router and the load-balance loss, the sort of token
// copies by expert, permute and combine. The grouped matmuls are gmm_test.cc.
#include "gemmax/base/convert.h"
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax::conformance {

// The forward on random logits (with a tie: the lower expert id goes first); then the load-balance
// loss and the backward on the true probabilities and choices, so that their sums see the same
// inputs on both sides.
CONFORMANCE_CASE(RouterLoadBalanceAndTheirBackward) {
  struct Size {
    int64_t B, S, E, K;
  };
  for (DType dt : h.dtypes())
    for (const Size& z : {Size{3, 10, 11, 3}, Size{2, 21, 40, 6}})
      for (bool renorm : {true, false}) {
        const int64_t T = z.B * z.S, E = z.E, K = z.K;
        const std::string what = "E=" + std::to_string(E) + (renorm ? " renormalized" : "");
        Tensor logits = h.rand({T, E}, dt, 2.0);
        set_from_double(logits, 5, get_as_double(logits, 4));
        const Tensor pes = h.rand({E}, DType::F32, 0.3);
        auto [got, truth] =
            h.run({logits, pes, h.zeros({T, E}), h.zeros({T, K}, DType::I32), h.zeros({T, K})},
                  [&](Backend& be, const Tensors& t) {
                    be.router_forward({.probs = t[2],
                                       .idx = t[3],
                                       .weights = t[4],
                                       .logits = t[0],
                                       .per_expert_scale = t[1],
                                       .renormalize = renorm});
                  });
        h.expect_near("router probs " + what, got[2], truth[2], 1e-6);
        h.expect_exact("router idx " + what, got[3], truth[3]);
        h.expect_near("router weights " + what, got[4], truth[4], 1e-6);

        const Tensor probs = convert_dtype(truth[2], DType::F32), idx = truth[3];
        auto [g2, t2] =
            h.run({probs, idx, h.zeros({z.B, E}), h.zeros({1}, DType::F64), h.zeros({z.B, E}),
                   h.zeros({T, E}, dt), h.rand({E}), h.rand({T, K}), pes, h.rand({z.B, E})},
                  [&](Backend& be, const Tensors& t) {
                    be.load_balance_forward({.density = t[2],
                                             .loss = t[3],
                                             .probs = t[0],
                                             .idx = t[1],
                                             .seq = z.S,
                                             .coefficient = 3.0});
                    be.load_balance_forward(
                        {.density = t[4], .probs = t[0], .idx = t[1], .seq = z.S});  // density only
                    be.router_backward({.dlogits = t[5],
                                        .dper_expert_scale = t[6],
                                        .dweights = t[7],
                                        .probs = t[0],
                                        .idx = t[1],
                                        .per_expert_scale = t[8],
                                        .renormalize = renorm,
                                        .lb_dprobs = t[9],
                                        .seq = z.S});
                  });
        h.expect_exact("density " + what, g2[2], t2[2]);
        h.expect_exact("density alone " + what, g2[4], t2[4]);
        EXPECT_NEAR(get_as_double(g2[3], 0), get_as_double(t2[3], 0),
                    1e-7 * std::abs(get_as_double(t2[3], 0)))
            << what;
        h.expect_near("router dlogits " + what, g2[5], t2[5], h.tol(dt));
        h.expect_near("router dper_expert_scale " + what, g2[6], t2[6], 1e-6);
      }
}

Tensor choices(Harness& h, const RoutedSize& z, bool random) {
  std::vector<int32_t> idx;
  for (int64_t t = 0; t < z.T; ++t)
    for (int64_t j = 0; j < z.K; ++j) {
      const int32_t e =
          random ? int32_t(h.rng().uniform_int(uint64_t(z.E - 1))) : int32_t((t * 7 + j * 2) % 5);
      idx.push_back(e == 5 ? int32_t(z.E - 1) : e);
    }
  return h.ints(idx).view({z.T, z.K});
}

// A stable sort with an expert no token chose, small and over one sort chunk; permute, combine and
// their backward through the sort's maps and in token order; rows of one element and of 16 bytes
// per access.
CONFORMANCE_CASE(RouteSortPermuteAndCombine) {
  for (const RoutedSize& z : {RoutedSize{23, 3, 6, {37}}, RoutedSize{4500, 3, 7, {21, 24}}}) {
    const int64_t T = z.T, K = z.K, E = z.E, TK = T * K;
    auto [got, truth] =
        h.run({choices(h, z, T > 100), h.zeros({TK}, DType::I32), h.zeros({TK}, DType::I32),
               h.zeros({TK}, DType::I32), h.zeros({E}, DType::I32)},
              [&](Backend& be, const Tensors& t) {
                be.route_sort({.routing = {t[1], t[2], t[3], t[4]}, .idx = t[0], .num_experts = E});
              });
    for (int i = 1; i < 5; ++i)
      h.expect_exact("route_sort " + std::to_string(i) + " T=" + std::to_string(T), got[size_t(i)],
                     truth[size_t(i)]);
    ASSERT_EQ(get_as_double(truth[4], 5), 0.0);
    const Tensor order = truth[1], inverse = truth[2];
    for (DType dt : h.dtypes())
      for (const int64_t D : z.widths)
        for (bool token_order : {false, true}) {
          if (token_order && T > 100) continue;  // the maps at scale; token order on the small
          const Tensor inv = token_order ? Tensor() : inverse, ord = token_order ? Tensor() : order;
          auto [g, w] =
              h.run({h.rand({T, D}, dt), order, inv, h.zeros({TK, D}, dt), h.rand({T, D}, dt),
                     h.rand({TK, D}, dt), h.rand({T, K}), h.zeros({T, D}, dt), h.zeros({TK, D}, dt),
                     h.zeros({T, K}), ord, h.rand({T, D}, dt)},
                    [&](Backend& be, const Tensors& t) {
                      be.permute({.xs = t[3], .x = t[0], .order = t[1], .k = K});
                      be.permute_backward(
                          {.dx = t[4], .dxs = t[5], .inverse = t[2], .k = K, .accumulate = true});
                      be.combine_forward({.m = t[7], .y = t[5], .inverse = t[2], .weights = t[6]});
                      be.combine_backward({.dy = t[8],
                                           .dweights = t[9],
                                           .dm = t[11],
                                           .y = t[5],
                                           .order = t[10],
                                           .weights = t[6]});
                    });
          const std::string what = "T=" + std::to_string(T) + " D=" + std::to_string(D) +
                                   (token_order ? " token order" : "");
          h.expect_exact("permute " + what, g[3], w[3]);
          h.expect_near("permute_backward " + what, g[4], w[4], h.tol(dt));
          h.expect_near("combine_forward " + what, g[7], w[7], h.tol(dt));
          h.expect_near("combine_backward dy " + what, g[8], w[8], h.tol(dt));
          h.expect_near("combine_backward dweights " + what, g[9], w[9], 1e-5);
        }
  }
}

}  // namespace gemmax::conformance

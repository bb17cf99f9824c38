// Conformance cases (op_conformance.h): elementwise ops and reductions, the dense matmul, the
// embedding, RMSNorm, RoPE and GeGLU.
#include <cmath>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/base/dropout_mask.h"
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax::conformance {

CONFORMANCE_CASE(FillCopyAndElementwise) {
  for (DType dt : h.dtypes()) {
    const Tensor a = h.rand({3, 37}, dt), b = h.rand({3, 37}, dt), f32 = h.rand({111});
    struct Ops {
      Tensor a, b, sum, from_f32, f64, i32, f32, to_f32;
    };
    auto [got, truth] = h.run(Ops{.a = a,
                                  .b = b,
                                  .sum = h.zeros({3, 37}, dt),
                                  .from_f32 = h.zeros({111}, dt),
                                  .f64 = h.zeros({5}, DType::F64),
                                  .i32 = h.zeros({4}, DType::I32),
                                  .f32 = f32,
                                  .to_f32 = h.zeros({3, 37})},
                              [](Backend& be, const Ops& t) {
                                be.add({.out = t.sum, .a = t.a, .b = t.b});
                                be.axpy({.y = t.sum, .alpha = -0.75, .x = t.b});
                                be.scale({.x = t.a, .alpha = 1.5});
                                // float32 -> the dtype under test, and back
                                be.copy({.dst = t.from_f32, .src = t.f32});
                                be.copy({.dst = t.to_f32, .src = t.b});
                                be.fill({.x = t.f64, .value = 2.5});
                                be.fill({.x = t.i32, .value = 7});
                              });
    h.expect_near("add, axpy", got.sum, truth.sum, 2 * h.tol(dt));
    h.expect_near("scale", got.a, truth.a, h.tol(dt));
    h.expect_near("copy from float32", got.from_f32, truth.from_f32, h.tol(dt));
    h.expect_exact("copy to float32", got.to_f32, truth.to_f32);
    h.expect_exact("fill float64", got.f64, truth.f64);
    h.expect_exact("fill int32", got.i32, truth.i32);
  }
}

// Sums of squares in fp64 over many elements, into a scalar that already holds a value; the
// layer_scalar sum and its backward.
CONFORMANCE_CASE(SumSquaresAndScaledSum) {
  for (DType dt : h.dtypes())
    for (const int64_t n : {111, 999}) {
      const Tensor x = h.rand({100003}, dt), a = h.rand({n}, dt), b = h.rand({n}, dt),
                   dy = h.rand({n}, dt), s = h.rand({1});
      Tensor acc = h.zeros({1}, DType::F64);
      set_from_double(acc, 0, 0.25);
      struct Ops {
        Tensor x, sum, a, b, dy, s, y, dab, ds;
      };
      auto [got, truth] =
          h.run(Ops{x, acc, a, b, dy, s, h.zeros({n}, dt), h.zeros({n}, dt), h.rand({1})},
                [](Backend& be, const Ops& t) {
                  be.sum_squares({.sum = t.sum, .x = t.x});
                  be.scaled_sum_forward({.y = t.y, .a = t.a, .b = t.b, .s = t.s});
                  be.scaled_sum_backward(
                      {.dab = t.dab, .ds = t.ds, .dy = t.dy, .a = t.a, .b = t.b, .s = t.s});
                });
      EXPECT_NEAR(get_as_double(got.sum, 0), get_as_double(truth.sum, 0),
                  1e-12 * get_as_double(truth.sum, 0));
      h.expect_near("scaled_sum y", got.y, truth.y, h.tol(dt));
      h.expect_near("scaled_sum dab", got.dab, truth.dab, h.tol(dt));
      // bfloat16 rounds a + b (the forward's sum) before the product: one rounding a term.
      double terms = 0;
      for (int64_t i = 0; i < n; ++i)
        terms += std::abs(get_as_double(dy, i) * (get_as_double(a, i) + get_as_double(b, i)));
      h.expect_near("scaled_sum ds", got.ds, truth.ds, 1e-5,
                    dt == DType::BF16 ? std::ldexp(terms, -9) : 0.0);
    }
}

CONFORMANCE_CASE(TransposeGroups) {
  for (DType dt : h.dtypes())
    for (const Shape& s : {Shape{3, 45, 70}, Shape{3, 37, 45}}) {
      struct Ops {
        Tensor in, out;
      };
      auto [got, truth] =
          h.run(Ops{.in = h.rand(s, dt), .out = h.zeros({s[0], s[2], s[1]}, dt)},
                [](Backend& be, const Ops& t) { be.transpose_groups({.out = t.out, .in = t.in}); });
      h.expect_exact("transpose_groups", got.out, truth.out);
    }
}

// Dropout drops the same elements on every backend (a hash of seed and index: the kept positions
// must agree bit for bit) and scales the rest by 1 / (1 - p); in place (y = x) too, as the backward
// runs on a gradient. Inputs hold no zeros, so that an element is kept iff it reads back nonzero.
CONFORMANCE_CASE(DropoutSameMaskOnEveryBackend) {
  struct Ops {
    Tensor x, y, g;  // y = dropout(x); g dropped in place
  };
  for (DType dt : {DType::F32, DType::BF16, DType::F64})
    for (const Shape& shape : {Shape{1001}, Shape{13, 77}, Shape{65537}})
      for (const double p : {0.0, 0.1, 0.5}) {
        const int64_t n = shape_numel(shape);
        const uint64_t seed = 1000 + uint64_t(n);
        Tensor x = h.rand(shape, dt), g = h.rand(shape, dt);
        for (const Tensor& t : {x, g})
          for (int64_t i = 0; i < n; ++i)
            if (get_as_double(t, i) == 0) set_from_double(t, i, 1.0);
        auto [got, truth] = h.run(Ops{x, h.zeros(shape, dt), g}, [&](Backend& be, const Ops& t) {
          be.dropout({.y = t.y, .x = t.x, .p = p, .seed = seed});
          be.dropout({.y = t.g, .x = t.g, .p = p, .seed = seed});
        });
        const std::string what = "dropout p=" + std::to_string(p) + " n=" + std::to_string(n) +
                                 " seed=" + std::to_string(seed);
        const uint64_t threshold = dropout_threshold(p);
        int64_t kept = 0;
        for (int64_t i = 0; i < n; ++i) {
          const bool keep = dropout_keep(seed, uint64_t(i), threshold);
          kept += keep;
          ASSERT_EQ(get_as_double(got.y, i) != 0, keep) << what << " [" << i << "]";
          ASSERT_EQ(get_as_double(got.g, i) != 0, keep) << what << " in place [" << i << "]";
          ASSERT_EQ(get_as_double(truth.y, i) != 0, keep) << what << " reference [" << i << "]";
        }
        if (p == 0) EXPECT_EQ(kept, n) << what;
        if (n > 50000) EXPECT_NEAR(double(kept) / double(n), 1 - p, 0.01) << what;
        h.expect_near(what, got.y, truth.y, h.tol(dt));
        h.expect_near(what + " in place", got.g, truth.g, h.tol(dt));
        if (p == 0) h.expect_exact(what + " keeps x", got.y, x);
      }
}

TEST(DropoutOpContract, RefusesWrongOperands) {
  auto be = make_backend("reference");
  const Tensor x = Tensor::zeros({4, 3}, DType::F32);
  be->dropout({.y = x, .x = x, .p = 0.5, .seed = 1});  // in place is fine
  for (double p : {1.0, -0.1, std::nan("")})
    testing::expect_error([&] { be->dropout({.y = x, .x = x, .p = p, .seed = 1}); },
                          {"dropout", "[0, 1)"});
  testing::expect_error(
      [&] { be->dropout({.y = Tensor::zeros({12}, DType::BF16), .x = x, .p = 0.5}); },
      {"dropout", "bfloat16[12]", "float32[4, 3]"});
  testing::expect_error(
      [&] {
        const Tensor i = Tensor::zeros({3}, DType::I32);
        be->dropout({.y = i, .x = i, .p = 0.5});
      },
      {"dropout", "int32[3]"});
}

// Every transposition, overwriting and accumulating, into the inputs' dtype and into float32;
// and a bfloat16 weight gradient over many rows accumulating into float32.
CONFORMANCE_CASE(MatmulAllTranspositionsAndMixedOutput) {
  struct Size {
    int64_t M, N, K;
  };
  struct Ops {
    Tensor a, b, c, c_f32;  // c in the inputs' dtype, c_f32 in float32
  };
  for (DType dt : h.dtypes())
    for (const Size& z : {Size{19, 45, 37}, Size{33, 17, 70}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool acc : {false, true}) {
            const Tensor a = h.rand(ta ? Shape{z.K, z.M} : Shape{z.M, z.K}, dt);
            const Tensor b = h.rand(tb ? Shape{z.N, z.K} : Shape{z.K, z.N}, dt);
            auto [got, truth] = h.run(Ops{a, b, h.rand({z.M, z.N}, dt), h.rand({z.M, z.N})},
                                      [&](Backend& be, const Ops& t) {
                                        for (const Tensor& c : {t.c, t.c_f32})
                                          be.matmul({.c = c,
                                                     .a = t.a,
                                                     .trans_a = ta,
                                                     .b = t.b,
                                                     .trans_b = tb,
                                                     .accumulate = acc});
                                      });
            const std::string what = "matmul " + std::to_string(z.M) + " ta=" + std::to_string(ta) +
                                     " tb=" + std::to_string(tb) + " acc=" + std::to_string(acc);
            h.expect_near(what, got.c, truth.c, h.tol(dt));
            h.expect_near(what + " float32 out", got.c_f32, truth.c_f32, 1e-5);
          }
  struct Gradient {
    Tensor a, b, c;
  };
  auto [got, truth] = h.run(
      Gradient{h.rand({700, 24}, DType::BF16), h.rand({700, 40}, DType::BF16), h.rand({24, 40})},
      [](Backend& be, const Gradient& t) {
        be.matmul(
            {.c = t.c, .a = t.a, .trans_a = true, .b = t.b, .trans_b = false, .accumulate = true});
      });
  h.expect_near("weight gradient", got.c, truth.c, 1e-5);
}

// Repeated tokens (their gradients add up), a float32 table under bfloat16 activations, and a
// vocabulary over 512 rows.
CONFORMANCE_CASE(EmbeddingLookupAndRepeatedTokenGradients) {
  struct Size {
    int64_t V, D;
    std::vector<int32_t> tokens;
    double scale;
  };
  for (DType dt : h.dtypes())
    // D = 2056: rows of 16-byte packs, more of them than a block has threads.
    for (const Size& z : {Size{6, 33, {4, 1, 4, 0, 5, 4}, 2.5},
                          Size{600, 19, {5, 599, 5, 0, 17, 5, 599, 300, 5}, 4.5},
                          Size{7, 2056, {3, 6, 3, 0, 3}, 1.5}}) {
      const int64_t n = int64_t(z.tokens.size());
      struct Ops {
        Tensor tokens, table, x, dx, dtable;
      };
      auto [got, truth] =
          h.run(Ops{h.ints(z.tokens), h.rand({z.V, z.D}), h.zeros({n, z.D}, dt),
                    h.rand({n, z.D}, dt), h.rand({z.V, z.D})},
                [&](Backend& be, const Ops& t) {
                  be.embedding_forward(
                      {.x = t.x, .tokens = t.tokens, .table = t.table, .scale = z.scale});
                  be.embedding_backward(
                      {.dtable = t.dtable, .dx = t.dx, .tokens = t.tokens, .scale = z.scale});
                });
      h.expect_near("embedding_forward V=" + std::to_string(z.V), got.x, truth.x, h.tol(dt));
      h.expect_near("embedding_backward V=" + std::to_string(z.V), got.dtable, truth.dtable, 1e-6);
    }
}

// A token outside the vocabulary is an error naming it, its position and the range: at the call
// or at the next synchronisation (asynchronous backends), once.
CONFORMANCE_CASE(EmbeddingOutOfRangeTokenIsReported) {
  Backend& be = h.be();
  Tensor x = be.alloc({2, 4}, DType::F32, MemKind::Workspace);
  const Tensor tokens = be.to_device(h.ints({1, 9}), MemKind::Workspace);
  const Tensor table = be.to_device(h.rand({5, 4}), MemKind::Workspace);
  testing::expect_error(
      [&] {
        be.embedding_forward({.x = x, .tokens = tokens, .table = table, .scale = 1.0});
        be.to_host(x);
      },
      {"token id 9", "position 1", "[0, 5)"});
  be.to_host(x);  // reported once
}

// With and without the scale, the residual, the rounding before the scale and accumulation into
// dx; rows of a few elements, and rows longer than one vector pass.
CONFORMANCE_CASE(RmsNormAllForms) {
  struct Size {
    int64_t rows, n;
    double x_scale;
  };
  struct Ops {
    Tensor x, w, residual, y, rstd, dy, dx, dw;  // w, residual and dw may be absent
  };
  for (DType dt : h.dtypes())
    for (const Size& z :
         {Size{150, 70, 3.0}, Size{13, 8, 1.0}, Size{13, 300, 1.0}, Size{13, 1100, 1.0},
          Size{5, 4096, 1.0}})  // 4096: each thread takes several 16-byte packs of a row
      for (bool with_w : {true, false})
        for (bool residual : {false, true})
          for (bool round_first : {false, true}) {
            const int64_t rows = z.rows, n = z.n;
            const Tensor w = with_w ? h.rand({n}) : Tensor(),
                         res = residual ? h.rand({rows, n}, dt) : Tensor();
            auto [got, truth] =
                h.run(Ops{h.rand({rows, n}, dt, z.x_scale), w, res, h.zeros({rows, n}, dt),
                          h.zeros({rows}), h.rand({rows, n}, dt), h.rand({rows, n}, dt),
                          with_w ? h.rand({n}) : Tensor()},
                      [&](Backend& be, const Ops& t) {
                        be.rmsnorm_forward({.y = t.y,
                                            .rstd = t.rstd,
                                            .x = t.x,
                                            .w = t.w,
                                            .eps = 1e-6,
                                            .out_scale = 0.7,
                                            .residual = t.residual,
                                            .round_before_scale = round_first});
                        be.rmsnorm_backward({.dx = t.dx,
                                             .dw = t.dw,
                                             .dy = t.dy,
                                             .x = t.x,
                                             .w = t.w,
                                             .rstd = t.rstd,
                                             .out_scale = 0.7,
                                             .accumulate_dx = residual});
                      });
            const std::string what = "[" + std::to_string(rows) + ", " + std::to_string(n) + "]" +
                                     (with_w ? " w" : "") + (residual ? " residual" : "") +
                                     (round_first ? " round first" : "");
            // Rounding first takes two more roundings (x * rstd, and w) before the product's.
            h.expect_near("rmsnorm y " + what, got.y, truth.y, (round_first ? 2 : 1) * h.tol(dt));
            h.expect_near("rmsnorm rstd " + what, got.rstd, truth.rstd, 1e-6);
            h.expect_near("rmsnorm dx " + what, got.dx, truth.dx, 2 * h.tol(dt));
            if (with_w) h.expect_near("rmsnorm dw " + what, got.dw, truth.dw, 1e-5);
          }
}

// The table of cos/sin (dimensions that do not rotate included), and rotations both ways.
CONFORMANCE_CASE(RopeTableAndRotationsBothWays) {
  const int64_t T = 7, heads = 3, hd = 12;
  Tensor freq = Tensor::empty({hd / 2}, DType::F64);
  for (int64_t i = 0; i < hd / 2; ++i)
    freq.data<double>()[i] = i < 4 ? std::pow(1e4, -2.0 * double(i) / double(hd)) : 0.0;
  struct Ops {
    Tensor x, positions, inv_freq, x_inverse, table;  // x rotated forward, x_inverse back
  };
  for (DType dt : h.dtypes())
    for (const std::vector<int32_t>& pos : {std::vector<int32_t>{0, 3, 1, 7, 2, 1000, 31},
                                            std::vector<int32_t>{0, 3, 1, 16000, 2, 9, 5}}) {
      auto [got, truth] = h.run(
          Ops{h.rand({T, heads, hd}, dt), h.ints(pos), freq, h.rand({T, heads, hd}, dt),
              h.zeros({T, hd / 2, 2})},
          [](Backend& be, const Ops& t) {
            be.rope_table({.table = t.table, .positions = t.positions, .inv_freq = t.inv_freq});
            be.rope({.x = t.x, .table = t.table, .inverse = false});
            be.rope({.x = t.x_inverse, .table = t.table, .inverse = true});
          });
      h.expect_exact("rope table", got.table, truth.table);
      h.expect_near("rope", got.x, truth.x, h.tol(dt));
      h.expect_near("rope inverse", got.x_inverse, truth.x_inverse, h.tol(dt));
    }
}

// Fused [gate | up] rows and separate halves; rows of 37 (one element per access) and 40 (16
// bytes per access); a backward that wants only one half.
CONFORMANCE_CASE(GegluFusedAndSplit) {
  // fused: [gate | up] rows; gate, up: the split halves; dup_alone: the backward wanting up only.
  struct Ops {
    Tensor fused, gate, up, a_fused, a_split, da, dfused, dgate, dup, dup_alone;
  };
  for (DType dt : h.dtypes())
    for (const int64_t F : {37, 40})
      for (const int64_t m : {9, 29}) {
        auto [got, truth] = h.run(
            Ops{h.rand({m, 2 * F}, dt, 2.0), h.rand({m, F}, dt, 2.0), h.rand({m, F}, dt),
                h.zeros({m, F}, dt), h.zeros({m, F}, dt), h.rand({m, F}, dt),
                h.zeros({m, 2 * F}, dt), h.zeros({m, F}, dt), h.zeros({m, F}, dt),
                h.zeros({m, F}, dt)},
            [](Backend& be, const Ops& t) {
              be.geglu_forward({.a = t.a_fused, .h = t.fused});
              be.geglu_forward({.a = t.a_split, .h = t.gate, .up = t.up});
              be.geglu_backward({.dh = t.dfused, .da = t.da, .h = t.fused});
              be.geglu_backward({.dh = t.dgate, .dup = t.dup, .da = t.da, .h = t.gate, .up = t.up});
              be.geglu_backward({.dup = t.dup_alone, .da = t.da, .h = t.gate, .up = t.up});
            });
        const std::string what = " [" + std::to_string(m) + ", " + std::to_string(F) + "]";
        h.expect_near("geglu fused" + what, got.a_fused, truth.a_fused, h.tol(dt));
        h.expect_near("geglu split" + what, got.a_split, truth.a_split, h.tol(dt));
        h.expect_near("geglu fused dh" + what, got.dfused, truth.dfused, h.tol(dt));
        h.expect_near("geglu split dgate" + what, got.dgate, truth.dgate, h.tol(dt));
        h.expect_near("geglu split dup" + what, got.dup, truth.dup, h.tol(dt));
        h.expect_near("geglu dup alone" + what, got.dup_alone, truth.dup_alone, h.tol(dt));
      }
}

}  // namespace gemmax::conformance

// Every op of the cuda backend against the reference backend, on random inputs: float32 and
// bfloat16, odd sizes, empty expert groups, weight windows, row maps, windows and segments.
//
// The suite runs on four backends: the cuda kernels on the host (cuda_emulated, with and without
// the tensor-core kernels), which is how machines without a GPU check them, and on the GPU
// (cuda, fast and simple), whose runs skip with a one-line reason where no device is present.
// Both sides see the same inputs (drawn on the bfloat16 grid); the reference sums in fp64, the
// kernels in fp32, so float32 outputs agree to ~1e-5 and bfloat16 outputs to a rounding or two.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <tuple>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda/cuda_factory.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/convert.h"
#include "test_util.h"

namespace gemmax {
namespace {

using Tensors = std::vector<Tensor>;
using Op = std::function<void(Backend&, const Tensors&)>;

class KernelOps : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string p = GetParam();
    BackendOptions o;
    o.name = p.rfind("gpu", 0) == 0 ? "cuda" : "cuda_emulated";
    o.cuda_kernels = p.find("simple") != std::string::npos ? "simple" : "fast";
    // bench/gpu_check.sh runs the GPU tests with every launch checked, naming a faulting kernel.
    o.cuda_sync_check = std::getenv("GEMMAX_TEST_CUDA_SYNC_CHECK") != nullptr;
    if (o.name == "cuda") {
      std::string why;
      if (!cuda::cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    }
    be = make_backend(o);
  }

  // Random values on the bf16 grid, so that float32 and bfloat16 runs see the same numbers.
  Tensor rand(const Shape& s, DType dt = DType::F32, double scale = 1.0) {
    Tensor t = Tensor::empty(s, dt);
    for (int64_t i = 0; i < t.numel(); ++i)
      set_from_double(t, i, double(float(bf16(scale * rng.normal()))));
    return t;
  }
  static Tensor ints(const std::vector<int32_t>& v) {
    Tensor t = Tensor::empty({int64_t(v.size())}, DType::I32);
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  }
  static Tensor zeros(const Shape& s, DType dt = DType::F32) { return Tensor::zeros(s, dt); }
  static Tensor clone(const Tensor& t) {
    if (!t.defined()) return t;
    Tensor c = Tensor::empty(t.shape(), t.dtype());
    std::memcpy(c.raw(), t.raw(), t.nbytes());
    return c;
  }

  // Runs op on the reference backend (on copies of `tensors`) and on the backend under test (on
  // device copies); returns both sets of tensors, on the host, after the op.
  std::pair<Tensors, Tensors> both(const Tensors& tensors, const Op& op) {
    Tensors r, d;
    for (const Tensor& t : tensors) {
      r.push_back(clone(t));
      d.push_back(t.defined() ? be->to_device(t, MemKind::Workspace) : t);
    }
    op(ref, r);
    op(*be, d);
    Tensors out;
    for (const Tensor& t : d) out.push_back(t.defined() ? clone(be->to_host(t)) : t);
    return {r, out};
  }

  static double tol(DType dt) { return dt == DType::BF16 ? 1.0 / 128 : 3e-5; }

  // |got - want| <= rtol |want| + atol max|want| element by element.
  static void expect_close(const std::string& what, const Tensor& got, const Tensor& want,
                           double rtol, double atol = -1) {
    ASSERT_EQ(got.numel(), want.numel()) << what;
    if (atol < 0) atol = rtol;
    double scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      scale = std::max(scale, std::abs(get_as_double(want, i)));
    int bad = 0;
    for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
      const double g = get_as_double(got, i), w = get_as_double(want, i);
      if (!(std::abs(g - w) <= rtol * std::abs(w) + atol * scale)) {
        ++bad;
        ADD_FAILURE() << what << "[" << i << "]: got " << g << ", reference " << w << " (of max "
                      << scale << ")";
      }
    }
  }
  static void expect_equal(const std::string& what, const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.numel(), want.numel()) << what;
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(get_as_double(got, i), get_as_double(want, i)) << what << "[" << i << "]";
  }

  std::unique_ptr<Backend> be;
  ReferenceBackend ref;
  Rng rng{11};
};

const DType kActs[] = {DType::F32, DType::BF16};

TEST_P(KernelOps, FillCopyAndElementwise) {
  for (DType dt : kActs) {
    const Tensor a = rand({3, 37}, dt), b = rand({3, 37}, dt), f32 = rand({111});
    auto [r, d] = both({a, b, zeros({3, 37}, dt), zeros({111}, dt), zeros({5}, DType::F64),
                        zeros({4}, DType::I32), f32},
                       [](Backend& be, const Tensors& t) {
                         be.add({.out = t[2], .a = t[0], .b = t[1]});
                         be.axpy({.y = t[2], .alpha = -0.75, .x = t[1]});
                         be.scale({.x = t[0], .alpha = 1.5});
                         be.copy({.dst = t[3], .src = t[6]});  // float32 -> the dtype under test
                         be.fill({.x = t[4], .value = 2.5});
                         be.fill({.x = t[5], .value = 7});
                       });
    for (int i : {0, 2, 3}) expect_close("elementwise " + std::to_string(i), d[i], r[i], tol(dt));
    expect_equal("fill f64", d[4], r[4]);
    expect_equal("fill i32", d[5], r[5]);
  }
}

TEST_P(KernelOps, OrderedSumsAreExactInFp64AndRepeatable) {
  for (DType dt : kActs) {
    const Tensor x = rand({100003}, dt), a = rand({999}, dt), b = rand({999}, dt),
                 dy = rand({999}, dt);
    const Tensor s = rand({1}, DType::F32);
    Tensor acc = zeros({1}, DType::F64);
    set_from_double(acc, 0, 0.25);
    auto [r, d] =
        both({x, acc, a, b, dy, s, zeros({999}, dt), zeros({999}, dt), zeros({1})},
             [](Backend& be, const Tensors& t) {
               be.sum_squares({.sum = t[1], .x = t[0]});
               be.scaled_sum_forward({.y = t[6], .a = t[2], .b = t[3], .s = t[5]});
               be.scaled_sum_backward(
                   {.dab = t[7], .ds = t[8], .dy = t[4], .a = t[2], .b = t[3], .s = t[5]});
             });
    EXPECT_NEAR(get_as_double(d[1], 0), get_as_double(r[1], 0), 1e-12 * get_as_double(r[1], 0));
    expect_close("scaled_sum_forward", d[6], r[6], tol(dt));
    expect_close("scaled_sum_backward dab", d[7], r[7], tol(dt));
    EXPECT_NEAR(get_as_double(d[8], 0), get_as_double(r[8], 0),
                1e-5 * std::abs(get_as_double(r[8], 0)) + 1e-6);
    // Same input, same bits.
    auto [r2, d2] = both(
        {x, acc}, [](Backend& be, const Tensors& t) { be.sum_squares({.sum = t[1], .x = t[0]}); });
    EXPECT_EQ(get_as_double(d2[1], 0), get_as_double(d[1], 0));
  }
}

TEST_P(KernelOps, TransposeGroups) {
  for (DType dt : kActs) {
    auto [r, d] =
        both({rand({3, 45, 70}, dt), zeros({3, 70, 45}, dt)},
             [](Backend& be, const Tensors& t) { be.transpose_groups({.out = t[1], .in = t[0]}); });
    expect_equal("transpose_groups", d[1], r[1]);
  }
}

TEST_P(KernelOps, MatmulAllTranspositionsAndMixedOutput) {
  for (DType dt : kActs)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t M = 33, N = 17, K = 70;
        const Tensor a = rand(ta ? Shape{K, M} : Shape{M, K}, dt);
        const Tensor b = rand(tb ? Shape{N, K} : Shape{K, N}, dt);
        auto [r,
              d] = both({a, b, rand({M, N}, dt), rand({M, N}, DType::F32)}, [&](Backend& be,
                                                                                const Tensors& t) {
          be.matmul(
              {.c = t[2], .a = t[0], .trans_a = ta, .b = t[1], .trans_b = tb, .accumulate = true});
          be.matmul({.c = t[3],
                     .a = t[0],
                     .trans_a = ta,
                     .b = t[1],
                     .trans_b = tb,
                     .accumulate = true});  // fp32 out
        });
        expect_close("matmul", d[2], r[2], tol(dt));
        expect_close("matmul fp32 out", d[3], r[3], 3e-5);
      }
}

TEST_P(KernelOps, EmbeddingLookupAndRepeatedTokenGradients) {
  for (DType dt : kActs) {
    const int64_t V = 600, D = 19;  // 600 > 512: two radix passes
    const Tensor tokens = ints({5, 599, 5, 0, 17, 5, 599, 300, 5});
    const Tensor table = rand({V, D});  // fp32 master table
    auto [r, d] =
        both({tokens, table, zeros({9, D}, dt), rand({9, D}, dt), rand({V, D})},
             [&](Backend& be, const Tensors& t) {
               be.embedding_forward({.x = t[2], .tokens = t[0], .table = t[1], .scale = 4.5});
               be.embedding_backward({.dtable = t[4], .dx = t[3], .tokens = t[0], .scale = 4.5});
             });
    expect_close("embedding_forward", d[2], r[2], tol(dt));
    expect_close("embedding_backward", d[4], r[4], 1e-6);
  }
}

TEST_P(KernelOps, OutOfRangeTokenIsReportedAtTheSync) {
  Tensor x = be->alloc({2, 4}, DType::F32, MemKind::Workspace);
  const Tensor tokens = be->to_device(ints({1, 9}), MemKind::Workspace);
  const Tensor table = be->to_device(rand({5, 4}), MemKind::Workspace);
  be->embedding_forward({.x = x, .tokens = tokens, .table = table, .scale = 1.0});
  testing::expect_error([&] { be->to_host(x); }, {"token id 9", "position 1", "[0, 5)"});
  be->to_host(x);  // reported once
}

TEST_P(KernelOps, RmsNormForwardBackwardAllForms) {
  for (DType dt : kActs)
    for (int64_t n : {8, 300, 1100})
      for (bool with_w : {false, true})
        for (bool round_first : {false, true}) {
          const int64_t rows = 13;
          const Tensor x = rand({rows, n}, dt), w = rand({n}, DType::F32),
                       res = rand({rows, n}, dt);
          const Tensor dy = rand({rows, n}, dt), dx0 = rand({rows, n}, dt);
          const Tensor wt = with_w ? w : Tensor();
          auto [r, d] = both({x, wt, res, zeros({rows, n}, dt), zeros({rows}), dy, dx0,
                              with_w ? rand({n}) : Tensor(), zeros({rows, n}, dt)},
                             [&](Backend& be, const Tensors& t) {
                               be.rmsnorm_forward({.y = t[3],
                                                   .rstd = t[4],
                                                   .x = t[0],
                                                   .w = t[1],
                                                   .eps = 1e-6,
                                                   .out_scale = 0.7,
                                                   .residual = t[2],
                                                   .round_before_scale = round_first});
                               be.rmsnorm_forward({.y = t[8],
                                                   .rstd = t[4],
                                                   .x = t[0],
                                                   .w = t[1],
                                                   .eps = 1e-6,
                                                   .out_scale = 0.7,
                                                   .round_before_scale = round_first});
                               be.rmsnorm_backward({.dx = t[6],
                                                    .dw = t[7],
                                                    .dy = t[5],
                                                    .x = t[0],
                                                    .w = t[1],
                                                    .rstd = t[4],
                                                    .out_scale = 0.7,
                                                    .accumulate_dx = true});
                             });
          const std::string what = "n=" + std::to_string(n);
          expect_close("rmsnorm y+res " + what, d[3], r[3], tol(dt));
          expect_close("rmsnorm y " + what, d[8], r[8], tol(dt));
          expect_close("rmsnorm rstd " + what, d[4], r[4], 1e-5);
          expect_close("rmsnorm dx " + what, d[6], r[6], dt == DType::BF16 ? 2.0 / 128 : 1e-4);
          if (with_w) expect_close("rmsnorm dw " + what, d[7], r[7], 1e-4);
        }
}

TEST_P(KernelOps, RopeTableAndRotationsBothWays) {
  for (DType dt : kActs) {
    const int64_t T = 7, heads = 3, hd = 12;
    Tensor freq = Tensor::empty({hd / 2}, DType::F64);
    for (int64_t i = 0; i < hd / 2; ++i)
      freq.data<double>()[i] = i < 4 ? std::pow(1e4, -2.0 * double(i) / double(hd)) : 0.0;
    auto [r, d] = both({rand({T, heads, hd}, dt), ints({0, 3, 1, 16000, 2, 9, 5}), freq,
                        rand({T, heads, hd}, dt), zeros({T, hd / 2, 2})},
                       [](Backend& be, const Tensors& t) {
                         be.rope_table({.table = t[4], .positions = t[1], .inv_freq = t[2]});
                         be.rope({.x = t[0], .table = t[4], .inverse = false});
                         be.rope({.x = t[3], .table = t[4], .inverse = true});
                       });
    expect_close("rope table", d[4], r[4], 1e-6);
    expect_close("rope", d[0], r[0], tol(dt));
    expect_close("rope inverse", d[3], r[3], tol(dt));
  }
}

// Rows of 37 go one element per access, rows of 40 16 bytes per access.
TEST_P(KernelOps, GegluFusedAndSplit) {
  for (DType dt : kActs)
    for (const int64_t F : {37, 40}) {
      const int64_t m = 9;
      auto [r, d] =
          both({rand({m, 2 * F}, dt), rand({m, F}, dt), rand({m, F}, dt), zeros({m, F}, dt),
                zeros({m, F}, dt), rand({m, F}, dt), zeros({m, 2 * F}, dt), zeros({m, F}, dt),
                zeros({m, F}, dt)},
               [](Backend& be, const Tensors& t) {
                 be.geglu_forward({.a = t[3], .h = t[0]});
                 be.geglu_forward({.a = t[4], .h = t[1], .up = t[2]});
                 be.geglu_backward({.dh = t[6], .da = t[5], .h = t[0]});
                 be.geglu_backward({.dh = t[7], .dup = t[8], .da = t[5], .h = t[1], .up = t[2]});
               });
      for (int i : {3, 4, 6, 7, 8})
        expect_close("geglu " + std::to_string(i) + " F=" + std::to_string(F), d[i], r[i],
                     tol(dt));
    }
}

// Causal GQA attention with windows and segments at the model's head sizes and odd ones.
TEST_P(KernelOps, AttentionForwardAndBackward) {
  struct Case {
    int64_t B, S, H, KV, hd, window;
  };
  for (DType dt : kActs)
    for (const Case& c :
         {Case{2, 37, 4, 2, 8, 5}, Case{1, 50, 2, 1, 12, 0}, Case{1, 70, 4, 2, 64, 0},
          Case{1, 100, 4, 4, 128, 0}, Case{2, 40, 2, 1, 256, 16}, Case{1, 150, 4, 2, 256, 40},
          Case{1, 33, 2, 1, 512, 0}, Case{1, 70, 8, 1, 512, 0}}) {
      const int64_t T = c.B * c.S;
      std::vector<int32_t> seg(T);
      for (int64_t t = 0; t < T; ++t) seg[t] = (t % c.S) < c.S / 3 ? 1 : 2;  // two documents a row
      const AttentionShape s{c.B, c.S, c.H, c.KV, c.hd, c.window};
      auto [r, d] = both(
          {rand({T, c.H, c.hd}, dt), rand({T, c.KV, c.hd}, dt), rand({T, c.KV, c.hd}, dt),
           ints(seg), zeros({T, c.H, c.hd}, dt), zeros({c.B, c.H, c.S}), rand({T, c.H, c.hd}, dt),
           zeros({T, c.H, c.hd}, dt), zeros({T, c.KV, c.hd}, dt), zeros({T, c.KV, c.hd}, dt)},
          [&](Backend& be, const Tensors& t) {
            be.attention_forward({.o = t[4],
                                  .lse = t[5],
                                  .q = t[0],
                                  .k = t[1],
                                  .v = t[2],
                                  .segment_ids = t[3],
                                  .shape = s});
            be.attention_backward({.dq = t[7],
                                   .dk = t[8],
                                   .dv = t[9],
                                   .dout = t[6],
                                   .q = t[0],
                                   .k = t[1],
                                   .v = t[2],
                                   .o = t[4],
                                   .lse = t[5],
                                   .segment_ids = t[3],
                                   .shape = s});
          });
      const std::string what = "hd=" + std::to_string(c.hd) + " S=" + std::to_string(c.S);
      const double bt = dt == DType::BF16 ? 2.0 / 128 : 1e-4;
      expect_close("attention o " + what, d[4], r[4], bt);
      expect_close("attention lse " + what, d[5], r[5], 1e-5);
      expect_close("attention dq " + what, d[7], r[7], bt);
      expect_close("attention dk " + what, d[8], r[8], bt);
      expect_close("attention dv " + what, d[9], r[9], bt);
    }
}

// Long documents: most tiles hold only visible pairs and skip the mask; the diagonal, the
// window's edge, the documents' edges and the sequence's end still need it.
TEST_P(KernelOps, AttentionInteriorAndBoundaryTiles) {
  if (std::string(GetParam()).find("simple") != std::string::npos)
    GTEST_SKIP() << "the plain kernels mask every pair: AttentionForwardAndBackward covers them";
  struct Case {
    int64_t S, H, KV, hd, window, docs;
  };
  for (const Case& c : {Case{300, 2, 1, 128, 0, 1}, Case{300, 2, 2, 128, 0, 3},
                        Case{260, 2, 1, 256, 70, 1}, Case{200, 4, 2, 256, 0, 2}}) {
    const int64_t B = 1, T = B * c.S;
    std::vector<int32_t> seg(T);
    for (int64_t t = 0; t < T; ++t) seg[t] = int32_t(t * c.docs / c.S);
    const AttentionShape s{B, c.S, c.H, c.KV, c.hd, c.window};
    const DType dt = DType::BF16;
    auto [r, d] =
        both({rand({T, c.H, c.hd}, dt), rand({T, c.KV, c.hd}, dt), rand({T, c.KV, c.hd}, dt),
              ints(seg), zeros({T, c.H, c.hd}, dt), zeros({B, c.H, c.S}), rand({T, c.H, c.hd}, dt),
              zeros({T, c.H, c.hd}, dt), zeros({T, c.KV, c.hd}, dt), zeros({T, c.KV, c.hd}, dt)},
             [&](Backend& be, const Tensors& t) {
               be.attention_forward({.o = t[4],
                                     .lse = t[5],
                                     .q = t[0],
                                     .k = t[1],
                                     .v = t[2],
                                     .segment_ids = t[3],
                                     .shape = s});
               be.attention_backward({.dq = t[7],
                                      .dk = t[8],
                                      .dv = t[9],
                                      .dout = t[6],
                                      .q = t[0],
                                      .k = t[1],
                                      .v = t[2],
                                      .o = t[4],
                                      .lse = t[5],
                                      .segment_ids = t[3],
                                      .shape = s});
             });
    const std::string what = "hd=" + std::to_string(c.hd) + " S=" + std::to_string(c.S) +
                             " window=" + std::to_string(c.window) +
                             " docs=" + std::to_string(c.docs);
    expect_close("attention o " + what, d[4], r[4], 2.0 / 128);
    expect_close("attention lse " + what, d[5], r[5], 1e-5);
    expect_close("attention dq " + what, d[7], r[7], 2.0 / 128);
    expect_close("attention dk " + what, d[8], r[8], 2.0 / 128);
    expect_close("attention dv " + what, d[9], r[9], 2.0 / 128);
  }
}

TEST_P(KernelOps, AttentionDecodeOverARingOfSlots) {
  for (DType dt : kActs) {
    const int64_t n = 3, H = 4, KV = 2, hd = 40, C = 9;
    auto [r, d] =
        both({zeros({n, H, hd}, dt), rand({n, H, hd}, dt), ints({5, 6, 7}), rand({C, KV, hd}, dt),
              rand({C, KV, hd}, dt), ints({4, 5, 6, 7, -1, 0, 1, 2, 3})},
             [](Backend& be, const Tensors& t) {
               be.attention_decode({.o = t[0],
                                    .q = t[1],
                                    .q_pos = t[2],
                                    .k = t[3],
                                    .v = t[4],
                                    .kv_pos = t[5],
                                    .window = 4});
             });
    expect_close("attention_decode", d[0], r[0], tol(dt));
  }
}

TEST_P(KernelOps, RouterLoadBalanceAndTheirBackward) {
  for (DType dt : kActs)
    for (bool renorm : {true, false}) {
      const int64_t B = 2, S = 21, T = B * S, E = 40, K = 6;
      const Tensor logits = rand({T, E}, dt, 2.0), pes = rand({E});
      auto [r, d] =
          both({logits, pes, zeros({T, E}), zeros({T, K}, DType::I32), zeros({T, K}), zeros({B, E}),
                zeros({1}, DType::F64), rand({T, K}), rand({B, E}), zeros({T, E}, dt), rand({E})},
               [&](Backend& be, const Tensors& t) {
                 be.router_forward({.probs = t[2],
                                    .idx = t[3],
                                    .weights = t[4],
                                    .logits = t[0],
                                    .per_expert_scale = t[1],
                                    .renormalize = renorm});
                 be.load_balance_forward({.density = t[5],
                                          .loss = t[6],
                                          .probs = t[2],
                                          .idx = t[3],
                                          .seq = S,
                                          .coefficient = 0.3});
                 be.router_backward({.dlogits = t[9],
                                     .dper_expert_scale = t[10],
                                     .dweights = t[7],
                                     .probs = t[2],
                                     .idx = t[3],
                                     .per_expert_scale = t[1],
                                     .renormalize = renorm,
                                     .lb_dprobs = t[8],
                                     .seq = S});
               });
      expect_close("router probs", d[2], r[2], 1e-6);
      expect_equal("router idx", d[3], r[3]);
      expect_close("router weights", d[4], r[4], 1e-5);
      expect_close("density", d[5], r[5], 1e-7);
      EXPECT_NEAR(get_as_double(d[6], 0), get_as_double(r[6], 0), 1e-6);
      expect_close("dlogits", d[9], r[9], dt == DType::BF16 ? 2.0 / 128 : 1e-5);
      expect_close("dper_expert_scale", d[10], r[10], 1e-5);
    }
}

TEST_P(KernelOps, RouteSortPermuteAndCombine) {
  for (DType dt : kActs) {
    const int64_t T = 4500, K = 3, E = 7;  // over one sort chunk; expert 5 never chosen
    std::vector<int32_t> idx(T * K);
    for (int64_t i = 0; i < T * K; ++i) {
      const int32_t e = int32_t(rng.uniform_int(E - 1));
      idx[i] = e == 5 ? 6 : e;
    }
    Tensors in = {ints(idx), zeros({T * K}, DType::I32), zeros({T * K}, DType::I32),
                  zeros({T * K}, DType::I32), zeros({E}, DType::I32)};
    auto [r, d] = both(in, [&](Backend& be, const Tensors& t) {
      be.route_sort({.routing = {t[1], t[2], t[3], t[4]}, .idx = t[0], .num_experts = E});
    });
    for (int i = 1; i < 5; ++i) expect_equal("route_sort " + std::to_string(i), d[i], r[i]);
    const Tensor order = r[1], inverse = r[2];
    for (const int64_t D : {21, 24}) {  // rows one element, and 16 bytes, per access
      auto [r2, d2] =
          both({rand({T, D}, dt), order, inverse, zeros({T * K, D}, dt), rand({T, D}, dt),
                rand({T * K, D}, dt), rand({T, K}), zeros({T, D}, dt), zeros({T * K, D}, dt),
                zeros({T, K})},
               [&](Backend& be, const Tensors& t) {
                 be.permute({.xs = t[3], .x = t[0], .order = t[1], .k = K});
                 be.permute_backward(
                     {.dx = t[4], .dxs = t[5], .inverse = t[2], .k = K, .accumulate = true});
                 be.combine_forward({.m = t[7], .y = t[5], .inverse = t[2], .weights = t[6]});
                 be.combine_backward({.dy = t[8],
                                      .dweights = t[9],
                                      .dm = t[4],
                                      .y = t[5],
                                      .order = t[1],
                                      .weights = t[6]});
               });
      expect_equal("permute", d2[3], r2[3]);
      expect_close("permute_backward", d2[4], r2[4], tol(dt));
      expect_close("combine_forward", d2[7], r2[7], tol(dt));
      expect_close("combine_backward dy", d2[8], r2[8], tol(dt));
      expect_close("combine_backward dweights", d2[9], r2[9], 1e-5);
    }
  }
}

// Grouped matmuls: empty groups, a group over several tiles, row maps on either side, the gate
// and up windows of a fused weight, accumulation, and fp32 weight gradients of bf16 inputs.
TEST_P(KernelOps, GroupedMatmulsWithMapsAndWindows) {
  for (DType dt : kActs) {
    const std::vector<int32_t> sizes = {3, 0, 150, 1, 0, 70};
    const int64_t G = int64_t(sizes.size()), m = 224, k = 72, N = 2 * 40, F = 40, T = 112;
    std::vector<int32_t> token(m), perm(m);
    for (int64_t r = 0; r < m; ++r) token[r] = int32_t(rng.uniform_int(T));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t r = m - 1; r > 0; --r) std::swap(perm[r], perm[rng.uniform_int(r + 1)]);
    for (bool up : {false, true})
      for (bool acc : {false, true}) {
        GmmRows fwd;  // gather lhs rows from the tokens, scatter out rows through perm
        fwd.weight_begin = up ? F : 0;
        fwd.weight_rows = F;
        fwd.accumulate = acc;
        auto [r, d] = both(
            {rand({T, k}, dt), rand({G, N, k}, dt), ints(sizes), ints(token), ints(perm),
             rand({m, F}, dt), rand({m, F}, dt), rand({m, k}, dt), rand({G, N, k}, DType::F32)},
            [&](Backend& be, const Tensors& t) {
              GmmRows f = fwd;
              f.in = t[3];
              f.out = t[4];
              be.gmm({.out = t[5], .lhs = t[0], .rhs = t[1], .group_sizes = t[2], .rows = f});
              GmmRows b = fwd;  // dlhs rows in perm order, dout rows as sorted
              b.in = t[4];
              be.gmm_dlhs(
                  {.dlhs = t[7], .dout = t[6], .rhs = t[1], .group_sizes = t[2], .rows = b});
              GmmRows w = fwd;
              w.in = t[3];
              w.out = t[4];
              be.gmm_drhs(
                  {.drhs = t[8], .lhs = t[0], .dout = t[6], .group_sizes = t[2], .rows = w});
            });
        const std::string what = std::string(up ? "up" : "gate") + (acc ? " accumulate" : "");
        expect_close("gmm " + what, d[5], r[5], tol(dt));
        expect_close("gmm_dlhs " + what, d[7], r[7], tol(dt));
        expect_close("gmm_drhs " + what, d[8], r[8], dt == DType::BF16 ? 1e-5 : 3e-5);
      }
    // Plain layout: no maps, the whole weight.
    auto [r, d] =
        both({rand({m, k}, dt), rand({G, N, k}, dt), ints(sizes), zeros({m, N}, dt),
              rand({m, N}, dt), zeros({m, k}, dt), zeros({G, N, k}, dt)},
             [&](Backend& be, const Tensors& t) {
               be.gmm({.out = t[3], .lhs = t[0], .rhs = t[1], .group_sizes = t[2]});
               be.gmm_dlhs({.dlhs = t[5], .dout = t[4], .rhs = t[1], .group_sizes = t[2]});
               be.gmm_drhs({.drhs = t[6], .lhs = t[0], .dout = t[4], .group_sizes = t[2]});
             });
    expect_close("gmm plain", d[3], r[3], tol(dt));
    expect_close("gmm_dlhs plain", d[5], r[5], tol(dt));
    expect_close("gmm_drhs plain", d[6], r[6], tol(dt));
  }
}

TEST_P(KernelOps, GroupSizesThatDoNotAddUpAreReported) {
  const Tensor lhs = be->to_device(rand({6, 4}), MemKind::Workspace);
  const Tensor rhs = be->to_device(rand({2, 3, 4}), MemKind::Workspace);
  const Tensor sizes = be->to_device(ints({2, 3}), MemKind::Workspace);
  Tensor out = be->alloc({6, 3}, DType::F32, MemKind::Workspace);
  be->gmm({.out = out, .lhs = lhs, .rhs = rhs, .group_sizes = sizes});
  testing::expect_error([&] { be->to_host(out); }, {"gmm", "sum to 5", "6 rows"});
}

// Many groups: the group table is scanned by many threads of one block, several groups each.
TEST_P(KernelOps, GroupedMatmulsOverManyGroupsAndTheirTableScan) {
  const int64_t G = 520, k = 16, N = 24;
  std::vector<int32_t> sizes(G, 0);
  for (int64_t g = 0; g < G; g += 7) sizes[g] = int32_t(g % 3 + (g % 5 == 0 ? 130 : 0));
  const int64_t m = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  auto [r, d] = both({rand({m, k}, DType::BF16), rand({G, N, k}, DType::BF16), ints(sizes),
                      zeros({m, N}, DType::BF16), rand({m, N}, DType::BF16),
                      zeros({m, k}, DType::BF16), zeros({G, N, k})},
                     [&](Backend& be, const Tensors& t) {
                       be.gmm({.out = t[3], .lhs = t[0], .rhs = t[1], .group_sizes = t[2]});
                       be.gmm_dlhs({.dlhs = t[5], .dout = t[4], .rhs = t[1], .group_sizes = t[2]});
                       be.gmm_drhs({.drhs = t[6], .lhs = t[0], .dout = t[4], .group_sizes = t[2]});
                     });
  expect_close("gmm", d[3], r[3], tol(DType::BF16));
  expect_close("gmm_dlhs", d[5], r[5], tol(DType::BF16));
  expect_close("gmm_drhs", d[6], r[6], 1e-5);
}

TEST_P(KernelOps, GroupSizesThatDoNotAddUpAreReportedByTheTensorCoreKernelsToo) {
  const Tensor lhs = be->to_device(rand({6, 8}, DType::BF16), MemKind::Workspace);
  const Tensor rhs = be->to_device(rand({2, 8, 8}, DType::BF16), MemKind::Workspace);
  const Tensor sizes = be->to_device(ints({2, 3}), MemKind::Workspace);
  Tensor out = be->alloc({6, 8}, DType::BF16, MemKind::Workspace);
  be->gmm({.out = out, .lhs = lhs, .rhs = rhs, .group_sizes = sizes});
  testing::expect_error([&] { be->to_host(out); }, {"gmm", "sum to 5", "6 rows"});
}

// A bfloat16 op that falls back to the plain kernels says so in one line, once per op and shape
// class: a run that is 20-50x slower than it should be names why.
TEST_P(KernelOps, SlowFallbackIsAnnouncedOncePerOpAndShapeClass) {
  const bool simple = std::string(GetParam()).find("simple") != std::string::npos;
  auto gmm_of_width = [&](int64_t k) {
    const Tensor lhs = be->to_device(rand({5, k}, DType::BF16), MemKind::Workspace);
    const Tensor rhs = be->to_device(rand({1, 8, k}, DType::BF16), MemKind::Workspace);
    const Tensor sizes = be->to_device(ints({5}), MemKind::Workspace);
    Tensor out = be->alloc({5, 8}, DType::BF16, MemKind::Workspace);
    be->gmm({.out = out, .lhs = lhs, .rhs = rhs, .group_sizes = sizes});
    be->to_host(out);
  };
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  ::testing::internal::CaptureStderr();
  gmm_of_width(12);
  gmm_of_width(12);
  gmm_of_width(20);
  gmm_of_width(16);  // the tensor-core kernels apply: nothing to say
  const std::string said = ::testing::internal::GetCapturedStderr();
  if (simple) {
    EXPECT_EQ(count(said, "gmm runs the plain kernels (20-50x slower): cuda_kernels=simple"), 1)
        << said;
    EXPECT_EQ(count(said, "runs the plain kernels"), 1) << said;
  } else {
    EXPECT_EQ(count(said, "gmm [k=12, n=8] runs the plain kernels (20-50x slower): the "
                          "tensor-core kernels need k and n multiples of 8"),
              1)
        << said;
    EXPECT_EQ(count(said, "gmm [k=20, n=8] runs the plain kernels"), 1) << said;
    EXPECT_EQ(count(said, "runs the plain kernels"), 2) << said;
  }
}

TEST_P(KernelOps, SoftcapCrossEntropyLossAndGradient) {
  for (DType dt : kActs)
    for (double cap : {0.0, 30.0})
      for (bool grad : {false, true}) {
        const int64_t C = 6, V = 1000;
        auto [r, d] = both({rand({C, V}, dt, 8.0), zeros({1}, DType::F64),
                            ints({3, 999, 0, 7, 500, 2}), ints({1, 1, 0, 2, 1, 1})},
                           [&](Backend& be, const Tensors& t) {
                             be.softcap_cross_entropy({.logits = t[0],
                                                       .loss = t[1],
                                                       .targets = t[2],
                                                       .mask = t[3],
                                                       .cap = cap,
                                                       .grad_scale = 0.125,
                                                       .write_grad = grad});
                           });
        const std::string what = "cap " + std::to_string(cap) + (grad ? " grad" : "");
        EXPECT_NEAR(get_as_double(d[1], 0), get_as_double(r[1], 0), 1e-5 * get_as_double(r[1], 0))
            << what;
        expect_close("logits/grad " + what, d[0], r[0], dt == DType::BF16 ? 2.0 / 128 : 1e-5, 1e-5);
      }
}

// fp32 arithmetic on the device, fp64 in the reference: within a few float roundings. Sizes and
// offsets take the four-at-a-time path, its tail, and the one-at-a-time path of operands that are
// not 16-byte aligned.
TEST_P(KernelOps, AdamWWithClippingAndTheNonFiniteSkip) {
  for (const auto& [n, offset, sumsq] :
       {std::tuple{int64_t(1000), int64_t(0), 0.5}, std::tuple{int64_t(1000), int64_t(0), 400.0},
        std::tuple{int64_t(1000), int64_t(0), std::nan("")},
        std::tuple{int64_t(1003), int64_t(0), 400.0},
        std::tuple{int64_t(1003), int64_t(1), 400.0}}) {
    Tensor scalars = zeros({StepScalars::kCount}, DType::F64);
    set_from_double(scalars, StepScalars::kGradSumSq, sumsq);
    const Tensor p = rand({n}), g = rand({n}), m = rand({n}, DType::F32, 0.1), v = zeros({n});
    for (int64_t i = 0; i < n; ++i) set_from_double(v, i, 0.01 * (i % 7));
    AdamWStep st;
    st.lr = 1e-2;
    st.weight_decay = 0.1;
    st.clip_norm = 1.0;
    st.t = 3;
    auto [r, d] = both({p, g, m, v, scalars}, [&](Backend& be, const Tensors& t) {
      auto part = [&](int i) { return t[i].flat_slice(offset, {n - offset}); };
      be.adamw_step({.param = part(0),
                     .grad = part(1),
                     .m = part(2),
                     .v = part(3),
                     .step = st,
                     .scalars = t[4]});
    });
    for (int i : {0, 2, 3})
      expect_close("adamw " + std::to_string(i) + " n=" + std::to_string(n) +
                       " offset=" + std::to_string(offset),
                   d[i], r[i], 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, KernelOps,
                         ::testing::Values("emulated", "emulated_simple", "gpu", "gpu_simple"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace gemmax

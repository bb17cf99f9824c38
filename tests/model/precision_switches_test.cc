// MaxText's precision keys as switches (docs/TRAINING.md §1.2), on the reference backend (ground
// truth of the arithmetic), on the cpu backend (its fast kernels) and on the cuda kernels (their
// host emulator). logits_dot_in_fp32, on, brings a bf16 run closer to the fp64 reference;
// activations_in_float32=false and float32_weight_sum=false add MaxText's roundings;
// float32_gate_logits=true keeps the router in fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/strings.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/head.h"
#include "gemmax/train/memory_budget.h"
#include "test_util.h"

namespace gemmax {
namespace {

// Values rounded to bf16 and held in `dtype`: inputs every run reads exactly.
Tensor on_bf16_grid(const Tensor& t, DType dtype) {
  Tensor b = Tensor::empty(t.shape(), DType::BF16), out = Tensor::empty(t.shape(), dtype);
  for (int64_t i = 0; i < t.numel(); ++i) set_from_double(b, i, get_as_double(t, i));
  for (int64_t i = 0; i < t.numel(); ++i) set_from_double(out, i, get_as_double(b, i));
  return out;
}

struct HeadRun {
  double loss;
  Tensor dx, dembed, dnorm;
};

// The output head over a batch whose logits reach the soft-cap's curved part, once in fp64 and
// in bf16 with logits_dot_in_fp32 off and on. The master table is fp32 (weight_dtype); x, the
// table and the norm sit on the bf16 grid, so every run reads the same numbers and the
// differences are the head's own roundings.
class LogitsDotInFp32 : public ::testing::TestWithParam<const char*> {
 protected:
  ModelConfig cfg = [] {
    ModelConfig c = testing::small_test_config(1);
    c.vocab_size = 301;
    c.d_model = 64;
    return c;
  }();
  // fp64 runs (the truth) on the reference backend, the others on the backend under test.
  ReferenceBackend ref;
  std::unique_ptr<Backend> be = make_backend(backend_options());
  Batch batch = testing::make_batch(2, 48, cfg.vocab_size, 5, 20);
  StepInputs in = upload_batch(*be, batch), in_ref = upload_batch(ref, batch);
  Tensor x, table, norm;

  static BackendOptions backend_options() {
    BackendOptions o;
    o.name = GetParam();
    o.num_threads = 2;
    return o;
  }
  void SetUp() override {
    Rng rng(3);
    // x of entries +-1: its RMSNorm is the norm's scale to 5e-7, a bf16 value, so the bf16 runs'
    // normalised input is exact and what differs is the product's rounding.
    x = testing::random_tensor({in.tokens_count(), cfg.d_model}, rng);
    for (int64_t i = 0; i < x.numel(); ++i) set_from_double(x, i, get_as_double(x, i) < 0 ? -1 : 1);
    table =
        on_bf16_grid(testing::random_tensor({cfg.vocab_size, cfg.d_model}, rng, 1.0), DType::F64);
    norm = testing::random_tensor({cfg.d_model}, rng, 0.3);
    for (int64_t i = 0; i < norm.numel(); ++i) set_from_double(norm, i, 1 + get_as_double(norm, i));
    norm = on_bf16_grid(norm, DType::F64);
  }
  HeadRun run(DType act, bool fp32_logits, int64_t tiles) {
    Backend& b = act == DType::F64 ? ref : *be;
    ModelOptions o{act, RematPolicy::Full, tiles};
    o.logits_dot_in_fp32 = fp32_logits;
    const DType w = act == DType::BF16 ? DType::F32 : act;
    auto dev = [&](const Tensor& host, DType dt) {
      Tensor t = b.alloc(host.shape(), dt, MemKind::Params);
      Tensor h = Tensor::empty(host.shape(), dt);
      for (int64_t i = 0; i < host.numel(); ++i) set_from_double(h, i, get_as_double(host, i));
      b.upload(t, h);
      return t;
    };
    const HeadWeights hw{dev(table, head_dot_dtype(o)), dev(norm, w)};
    const HeadWeights hg{b.zeros(table.shape(), w, MemKind::Grads),
                         b.zeros(norm.shape(), w, MemKind::Grads)};
    const Tensor dx = b.alloc(x.shape(), act, MemKind::Workspace);
    const Tensor loss = b.zeros({1}, DType::F64, MemKind::Workspace);
    head_loss(b, cfg, act == DType::F64 ? in_ref : in, o, hw, dev(x, act), 1.0 / 96, loss, &hg,
              &dx);
    return {get_as_double(b.to_host(loss), 0) / 96, b.to_host(dx), b.to_host(hg.embed),
            b.to_host(hg.final_norm)};
  }
};

TEST_P(LogitsDotInFp32, BringsTheBf16HeadCloserToFp64) {
  for (int64_t tiles : {1, 4}) {
    const HeadRun f64 = run(DType::F64, false, tiles);
    const HeadRun off = run(DType::BF16, false, tiles), on = run(DType::BF16, true, tiles);
    const std::string what = std::string(GetParam()) + ", " + std::to_string(tiles) + " tiles";
    EXPECT_GT(f64.loss, 1.0) << what << ": logits too small to test their rounding";
    const double loss_off = std::abs(off.loss - f64.loss), loss_on = std::abs(on.loss - f64.loss);
    // Off, each logit and each dz is rounded to bf16 (relative 2^-9); on, the product's inputs
    // are exact (x's norm is a bf16 value) and only dy and dx are rounded. Measured: the loss
    // error falls 130 times (8.7e-4 to 6.5e-6 on a loss of 20), the table's gradient is fp32's
    // (7e-3 to 4e-7), dx's and the norm's gradients' errors fall 3-4 times.
    EXPECT_LT(loss_on, 0.02 * loss_off)
        << what << ": loss error on " << loss_on << " off " << loss_off;
    EXPECT_LT(loss_on, 1e-6 * f64.loss) << what;
    const char* names[] = {"dx", "dembed", "dnorm"};
    const Tensor HeadRun::*grads[] = {&HeadRun::dx, &HeadRun::dembed, &HeadRun::dnorm};
    for (int i = 0; i < 3; ++i) {
      const double e_off = testing::relative_l2(f64.*grads[i], off.*grads[i]);
      const double e_on = testing::relative_l2(f64.*grads[i], on.*grads[i]);
      EXPECT_LT(e_on, i == 1 ? 1e-5 : 0.5 * e_off)
          << what << " " << names[i] << ": on " << e_on << " off " << e_off;
    }
  }
}

// In fp32 and fp64 runs (fp64: on the reference backend) the head already works in the
// activation dtype: the switch is a no-op.
TEST_P(LogitsDotInFp32, ChangesNothingOutsideBf16) {
  for (DType act : {DType::F32, DType::F64}) {
    const HeadRun a = run(act, false, 2), b = run(act, true, 2);
    EXPECT_EQ(a.loss, b.loss) << dtype_name(act);
    EXPECT_EQ(testing::relative_l2(a.dembed, b.dembed), 0.0) << dtype_name(act);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, LogitsDotInFp32,
                         ::testing::Values("reference", "cpu", "cuda_emulated"),
                         [](const auto& info) { return std::string(info.param); });

// The whole model: with logits_dot_in_fp32 the logits of a bf16 forward are fp32 (not bf16
// values held wider) and the step's loss is at least as close to the fp64 loss.
TEST(LogitsDotInFp32Model, LogitsAreFp32AndTheLossNoWorse) {
  ReferenceBackend be;
  const ModelConfig cfg = testing::small_test_config(2);
  const ParamTable table(cfg);
  const StepInputs in = upload_batch(be, testing::make_batch(2, 16, cfg.vocab_size, 3, 5));
  const Tensor w64 = testing::random_weights(table, 9);
  Tensor w32 = Tensor::empty({table.total()}, DType::F32);
  be.copy({.dst = w32, .src = w64});
  Tensor lf64;
  const double want = Gemma4Model(cfg, be, {DType::F64}).forward(in, w64, &lf64).total_loss;
  ModelOptions on{DType::BF16};
  on.logits_dot_in_fp32 = true;
  Tensor l_off, l_on;
  const double off_loss = Gemma4Model(cfg, be, {DType::BF16}).forward(in, w32, &l_off).total_loss;
  const double on_loss = Gemma4Model(cfg, be, on).forward(in, w32, &l_on).total_loss;
  EXPECT_EQ(l_off.dtype(), DType::BF16);
  ASSERT_EQ(l_on.dtype(), DType::F32);
  int64_t off_grid = 0;  // logits that are not bf16 values
  for (int64_t i = 0; i < l_on.numel(); ++i)
    off_grid += double(bf16(get_as_double(l_on, i))) != get_as_double(l_on, i);
  EXPECT_GT(off_grid, l_on.numel() / 2) << "the fp32 logits are bf16 values";
  EXPECT_LT(testing::relative_l2(lf64, l_on), testing::relative_l2(lf64, l_off));
  EXPECT_LE(std::abs(on_loss - want), std::abs(off_loss - want) + 1e-3 * want);
}

// ---- activations_in_float32: GeGLU's roundings --------------------------------------------

constexpr double kSqrt2OverPi = 0.79788456080286535588;
double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x))); }
double gelu_grad(double x) {
  const double tau = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + tau) + 0.5 * x * (1.0 - tau * tau) * kSqrt2OverPi * (1.0 + 0.134145 * x * x);
}
double bf(double v) { return double(bf16(v)); }

BackendOptions options_of(const char* name) {
  BackendOptions o;
  o.name = name;
  o.num_threads = 2;
  return o;
}

Tensor host_copy(Backend& be, const Tensor& t) {
  const Tensor h = be.to_host(t);
  Tensor copy = Tensor::empty(h.shape(), h.dtype());
  std::memcpy(copy.raw(), h.raw(), h.nbytes());
  return copy;
}

// GeGLU on [gate | up] rows (fused) or on two tensors (split), forward and backward, with
// round_gelu off or on; bf16 throughout.
struct GegluRun {
  Tensor a, dgate, dup;
};
struct GegluCase {
  int64_t m = 24, F = 40;
  Tensor gate, up, da;  // bf16 host values
  GegluCase() {
    Rng rng(17);
    gate = on_bf16_grid(testing::random_tensor({m, F}, rng, 2.0), DType::BF16);
    up = on_bf16_grid(testing::random_tensor({m, F}, rng, 3.0), DType::BF16);
    da = on_bf16_grid(testing::random_tensor({m, F}, rng, 1.0), DType::BF16);
  }
  GegluRun run(Backend& be, bool round, bool split) const {
    const MemKind w = MemKind::Workspace;
    const Tensor da_d = be.to_device(da, w), a = be.alloc({m, F}, DType::BF16, w);
    GegluRun r;
    if (split) {
      const Tensor g = be.to_device(gate, w), u = be.to_device(up, w);
      const Tensor dg = be.alloc({m, F}, DType::BF16, w), du = be.alloc({m, F}, DType::BF16, w);
      be.geglu_forward({.a = a, .h = g, .up = u, .round_gelu = round});
      be.geglu_backward({.dh = dg, .dup = du, .da = da_d, .h = g, .up = u, .round_gelu = round});
      return {host_copy(be, a), host_copy(be, dg), host_copy(be, du)};
    }
    Tensor fused = Tensor::empty({m, 2 * F}, DType::BF16);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < F; ++j) {
        set_from_double(fused, i * 2 * F + j, get_as_double(gate, i * F + j));
        set_from_double(fused, i * 2 * F + F + j, get_as_double(up, i * F + j));
      }
    const Tensor h = be.to_device(fused, w), dh = be.alloc({m, 2 * F}, DType::BF16, w);
    be.geglu_forward({.a = a, .h = h, .round_gelu = round});
    be.geglu_backward({.dh = dh, .da = da_d, .h = h, .round_gelu = round});
    const Tensor dh_host = host_copy(be, dh);
    r = {host_copy(be, a), Tensor::empty({m, F}, DType::BF16), Tensor::empty({m, F}, DType::BF16)};
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < F; ++j) {
        set_from_double(r.dgate, i * F + j, get_as_double(dh_host, i * 2 * F + j));
        set_from_double(r.dup, i * F + j, get_as_double(dh_host, i * 2 * F + F + j));
      }
    return r;
  }
};

int64_t count_different(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += get_as_double(a, i) != get_as_double(b, i);
  return n;
}

// The reference backend does exactly MaxText's arithmetic: a = bf16(bf16(gelu(gate)) * up); in
// the backward the rounded gelu's gradient bf16(da * up) goes through gelu', and dup reads the
// rounded gelu. Off, each output is rounded once, so the two differ.
TEST(ActivationsInFloat32, ReferenceRoundsGeluBeforeTheProduct) {
  ReferenceBackend be;
  const GegluCase c;
  for (bool split : {false, true}) {
    const GegluRun on = c.run(be, true, split), off = c.run(be, false, split);
    for (int64_t i = 0; i < c.m * c.F; ++i) {
      const double g = get_as_double(c.gate, i), u = get_as_double(c.up, i);
      const double d = get_as_double(c.da, i);
      ASSERT_EQ(get_as_double(on.a, i), bf(bf(gelu(g)) * u)) << i;
      ASSERT_EQ(get_as_double(on.dgate, i), bf(bf(d * u) * gelu_grad(g))) << i;
      ASSERT_EQ(get_as_double(on.dup, i), bf(d * bf(gelu(g)))) << i;
      ASSERT_EQ(get_as_double(off.a, i), bf(gelu(g) * u)) << i;
      ASSERT_EQ(get_as_double(off.dgate, i), bf(d * u * gelu_grad(g))) << i;
    }
    // Measured: about a quarter of the outputs and gradients move by one bf16 step.
    EXPECT_GT(count_different(on.a, off.a), c.m * c.F / 20);
    EXPECT_GT(count_different(on.dgate, off.dgate), c.m * c.F / 20);
    EXPECT_GT(count_different(on.dup, off.dup), c.m * c.F / 20);
  }
}

// A small hand-checked case: gelu(1) = 0.8411920 rounds to 0.83984375 (bf16 steps of 2^-8
// there); times 5 that is 4.1992188, bf16 4.1875 (steps of 2^-5), where 5 gelu(1) = 4.2059600
// rounds to 4.21875.
TEST(ActivationsInFloat32, HandCheckedValue) {
  ReferenceBackend be;
  Tensor h = Tensor::empty({1, 2}, DType::BF16), a = Tensor::empty({1, 1}, DType::BF16);
  set_from_double(h, 0, 1.0);
  set_from_double(h, 1, 5.0);
  be.geglu_forward({.a = a, .h = h, .round_gelu = true});
  EXPECT_EQ(get_as_double(a, 0), 4.1875);
  be.geglu_forward({.a = a, .h = h, .round_gelu = false});
  EXPECT_EQ(get_as_double(a, 0), 4.21875);
}

class ActivationsInFloat32Kernels : public ::testing::TestWithParam<const char*> {};

// The cpu and cuda kernels do the reference's roundings: every value within one bf16 step of
// it (they compute gelu in fp32, the reference in fp64, so a gelu at a rounding boundary can
// land on the other side; near zero, where gelu's tanh form cancels, within 1e-5) and nearly
// all equal; and on them, too, the switch changes the result.
TEST_P(ActivationsInFloat32Kernels, AgreeWithTheReference) {
  ReferenceBackend ref;
  auto be = make_backend(options_of(GetParam()));
  const GegluCase c;
  for (bool split : {false, true}) {
    const GegluRun r = c.run(ref, true, split), k = c.run(*be, true, split);
    const GegluRun k_off = c.run(*be, false, split);
    const Tensor GegluRun::*outs[] = {&GegluRun::a, &GegluRun::dgate, &GegluRun::dup};
    for (const Tensor GegluRun::*o : outs) {
      int64_t equal = 0;
      for (int64_t i = 0; i < c.m * c.F; ++i) {
        const double want = get_as_double(r.*o, i), got = get_as_double(k.*o, i);
        ASSERT_LE(std::abs(got - want), std::ldexp(std::abs(want), -6) + 1e-5)
            << GetParam() << " element " << i;
        equal += got == want;
      }
      EXPECT_GE(equal, c.m * c.F * 95 / 100) << GetParam();
      EXPECT_GT(count_different(k.*o, k_off.*o), c.m * c.F / 20) << GetParam();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ActivationsInFloat32Kernels,
                         ::testing::Values("cpu", "cuda_emulated"),
                         [](const auto& info) { return std::string(info.param); });

// ---- attention=dot_product, float32_qk_product=false, float32_logits=true: bf16 scores ------

struct AttentionRun {
  Tensor o, dq, dk, dv;
};
// Causal GQA attention over two sequences of two segments each, one with a sliding window;
// q and k large enough that the scores' bf16 rounding (steps of 2^-3 at 16 to 32) moves the
// probabilities by percents.
struct AttentionCase {
  AttentionShape shape;
  Tensor q, k, v, dout, seg;
  explicit AttentionCase(int64_t hd, int64_t window = 0) {
    shape = {.batch = 2, .seq = 40, .num_heads = 4, .num_kv_heads = 2, .head_dim = hd,
             .window = window};
    const int64_t T = shape.batch * shape.seq;
    Rng rng(23);
    const double scale = 12.0 / std::sqrt(double(hd));  // scores of about +-18
    q = on_bf16_grid(testing::random_tensor({T, 4, hd}, rng, std::sqrt(scale)), DType::BF16);
    k = on_bf16_grid(testing::random_tensor({T, 2, hd}, rng, std::sqrt(scale)), DType::BF16);
    v = on_bf16_grid(testing::random_tensor({T, 2, hd}, rng), DType::BF16);
    dout = on_bf16_grid(testing::random_tensor({T, 4, hd}, rng), DType::BF16);
    seg = Tensor::empty({T}, DType::I32);
    for (int64_t t = 0; t < T; ++t) set_from_double(seg, t, t % shape.seq < 25 ? 1 : 2);
  }
  // round: the scores rounded (round_scores); softmax: the softmax too (round_softmax); dt: the
  // activation dtype (the inputs are bf16 values in any).
  AttentionRun run(Backend& be, bool round, bool softmax = false, DType dt = DType::BF16) const {
    const MemKind w = MemKind::Workspace;
    AttentionShape s = shape;
    s.round_scores = round;
    s.round_softmax = softmax;
    auto up = [&](const Tensor& t) { return be.to_device(on_bf16_grid(t, dt), w); };
    const Tensor qd = up(q), kd = up(k), vd = up(v), dod = up(dout), segd = be.to_device(seg, w);
    const DType stat = dt == DType::F64 ? DType::F64 : DType::F32;
    const Tensor o = be.alloc(q.shape(), dt, w);
    const Tensor lse = be.alloc({s.batch, s.num_heads, s.seq}, stat, w);
    const Tensor dq = be.alloc(q.shape(), dt, w), dk = be.alloc(k.shape(), dt, w),
                 dv = be.alloc(v.shape(), dt, w);
    be.attention_forward({.o = o, .lse = lse, .q = qd, .k = kd, .v = vd, .segment_ids = segd,
                          .shape = s});
    be.attention_backward({.dq = dq, .dk = dk, .dv = dv, .dout = dod, .q = qd, .k = kd, .v = vd,
                           .o = o, .lse = lse, .segment_ids = segd, .shape = s});
    return {host_copy(be, o), host_copy(be, dq), host_copy(be, dk), host_copy(be, dv)};
  }
  // Row i of head h of sequence b: each score q.k, summed in fp64, rounded to bf16 (-inf where
  // the causal window or the segments mask it); *max is the row's largest.
  std::vector<double> rounded_scores(int64_t b, int64_t h, int64_t i, double* max) const {
    const AttentionShape& s = shape;
    const int64_t hd = s.head_dim, ti = b * s.seq + i, kvh = h / 2;
    std::vector<double> score(size_t(s.seq), -INFINITY);
    *max = -INFINITY;
    for (int64_t j = std::max<int64_t>(0, i - s.window + 1); j <= i; ++j) {
      const int64_t tj = b * s.seq + j;
      if (get_as_double(seg, tj) != get_as_double(seg, ti)) continue;
      double d = 0;
      for (int64_t e = 0; e < hd; ++e)
        d += get_as_double(q, (ti * 4 + h) * hd + e) * get_as_double(k, (tj * 2 + kvh) * hd + e);
      score[size_t(j)] = bf(d);
      *max = std::max(*max, score[size_t(j)]);
    }
    return score;
  }
};

// The reference rounds each score q.k to bf16 and takes the softmax over the rounded scores:
// its output is that softmax's, computed in fp64 here, to the last bit; and off it differs.
TEST(AttentionBf16Scores, ReferenceRoundsEachScore) {
  ReferenceBackend be;
  const AttentionCase c(16, 12);
  const AttentionRun on = c.run(be, true), off = c.run(be, false);
  const AttentionShape& s = c.shape;
  const int64_t hd = s.head_dim;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.num_heads; ++h)
      for (int64_t i = 0; i < s.seq; ++i) {
        const int64_t ti = b * s.seq + i, kvh = h / 2;
        double mx;
        const std::vector<double> score = c.rounded_scores(b, h, i, &mx);
        std::vector<double> acc(size_t(hd), 0.0);
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          if (score[size_t(j)] == -INFINITY) continue;
          const double p = std::exp(score[size_t(j)] - mx);
          sum += p;
          for (int64_t e = 0; e < hd; ++e)
            acc[size_t(e)] += p * get_as_double(c.v, ((b * s.seq + j) * 2 + kvh) * hd + e);
        }
        for (int64_t e = 0; e < hd; ++e)
          ASSERT_EQ(get_as_double(on.o, (ti * 4 + h) * hd + e), bf(acc[size_t(e)] / sum))
              << "b " << b << " h " << h << " i " << i << " e " << e;
      }
  const Tensor AttentionRun::*outs[] = {&AttentionRun::o, &AttentionRun::dq, &AttentionRun::dk,
                                        &AttentionRun::dv};
  for (const Tensor AttentionRun::*x : outs)
    EXPECT_GT(testing::relative_l2(off.*x, on.*x), 1e-3);
}

class AttentionBf16ScoresKernels : public ::testing::TestWithParam<const char*> {};

Tensor difference(const Tensor& a, const Tensor& b) {
  Tensor d = Tensor::empty(a.shape(), DType::F64);
  for (int64_t i = 0; i < a.numel(); ++i)
    set_from_double(d, i, get_as_double(a, i) - get_as_double(b, i));
  return d;
}

// The cpu and cuda kernels (the plain kernels at head_dim 16, the tensor-core ones at 128) do
// the reference's rounding, forward and backward. The forward's output is as close to the
// reference's rounded attention as a small part of what the rounding changes. The gradients'
// change is smaller than the kernels' own bf16 distance to the reference (their probabilities
// and score gradients are bf16, the reference's fp64), so there the test compares the changes:
// what the switch changes on the kernels follows what it changes on the reference (a kernel
// that ignored the switch would be at 1; measured 0.16-0.48 on the flash kernels, 0.005 or
// less on the plain CUDA kernels, which keep their probabilities in fp32).
TEST_P(AttentionBf16ScoresKernels, AgreeWithTheReference) {
  ReferenceBackend ref;
  auto be = make_backend(options_of(GetParam()));
  for (int64_t hd : {16, 128}) {
    const AttentionCase c(hd, 12);
    const AttentionRun r_on = c.run(ref, true), r_off = c.run(ref, false);
    const AttentionRun k_on = c.run(*be, true), k_off = c.run(*be, false);
    const char* names[] = {"o", "dq", "dk", "dv"};
    const Tensor AttentionRun::*outs[] = {&AttentionRun::o, &AttentionRun::dq, &AttentionRun::dk,
                                          &AttentionRun::dv};
    for (int n = 0; n < 4; ++n) {
      const Tensor AttentionRun::*x = outs[n];
      const double change = testing::relative_l2(r_off.*x, r_on.*x);
      const double agree = testing::relative_l2(r_on.*x, k_on.*x);
      const double kernel_change = testing::relative_l2(k_off.*x, k_on.*x);
      const double track =
          testing::relative_l2(difference(r_on.*x, r_off.*x), difference(k_on.*x, k_off.*x));
      if (n == 0) EXPECT_LT(agree, 0.25 * change) << GetParam() << " hd " << hd << " o";
      EXPECT_LT(track, 0.65) << GetParam() << " hd " << hd << " " << names[n];
      EXPECT_GT(kernel_change, 0.5 * change) << GetParam() << " hd " << hd << " " << names[n];
      ::testing::Test::RecordProperty(str_cat(names[n], " hd ", hd, " change"),
                                      std::to_string(change));
      ::testing::Test::RecordProperty(str_cat(names[n], " hd ", hd, " kernels"),
                                      std::to_string(agree));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionBf16ScoresKernels,
                         ::testing::Values("cpu", "cuda_emulated"),
                         [](const auto& info) { return std::string(info.param); });

// ---- MaxText's softmax in bf16 (both float32 attention keys false) --------------------------

// The reference's forward is, to the last bit, the rounding XLA applies on the CPU
// (reference/attention_rounded_softmax.h), written out here once more from that description.
TEST(AttentionBf16Softmax, ReferenceRoundsWhereXlaRounds) {
  ReferenceBackend be;
  const AttentionCase c(16, 12);
  const AttentionRun on = c.run(be, true, true), scores = c.run(be, true);
  const AttentionShape& s = c.shape;
  const int64_t hd = s.head_dim;
  int64_t rows = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.num_heads; ++h)
      for (int64_t i = 0; i < s.seq; ++i) {
        const int64_t ti = b * s.seq + i, kvh = h / 2;
        double mx;
        const std::vector<double> score = c.rounded_scores(b, h, i, &mx);
        std::vector<double> p(size_t(s.seq), 0.0);
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          if (score[size_t(j)] == -INFINITY) continue;
          const float e = std::exp(float(bf(float(score[size_t(j)] - mx))));  // fp32 exp
          sum += e;
          p[size_t(j)] = bf(e);
        }
        const float recip = 1.0f / float(bf(sum));
        for (int64_t e = 0; e < hd; ++e) {
          double u = 0;
          for (int64_t j = 0; j <= i; ++j)
            u += p[size_t(j)] * get_as_double(c.v, ((b * s.seq + j) * 2 + kvh) * hd + e);
          ASSERT_EQ(get_as_double(on.o, (ti * 4 + h) * hd + e), bf(float(bf(u)) * recip))
              << "b " << b << " h " << h << " i " << i << " e " << e;
        }
        ++rows;
      }
  EXPECT_EQ(rows, s.batch * s.num_heads * s.seq);
  // The softmax's roundings move every output beyond the scores' rounding alone.
  const Tensor AttentionRun::*outs[] = {&AttentionRun::o, &AttentionRun::dq, &AttentionRun::dk,
                                        &AttentionRun::dv};
  for (const Tensor AttentionRun::*x : outs)
    EXPECT_GT(testing::relative_l2(scores.*x, on.*x), 1e-3);
}

// In fp64 no rounding is left: the path is the plain softmax and its gradient (the max's share
// of the gradient vanishes), equal to the fp64 attention to rounding and to finite differences
// of its own forward.
TEST(AttentionBf16Softmax, Fp64IsThePlainSoftmaxAndItsGradient) {
  ReferenceBackend be;
  const AttentionCase c(8, 12);
  const AttentionRun on = c.run(be, true, true, DType::F64), off = c.run(be, false, false, DType::F64);
  EXPECT_LT(testing::relative_l2(off.o, on.o), 1e-14);
  EXPECT_LT(testing::relative_l2(off.dq, on.dq), 1e-13);
  EXPECT_LT(testing::relative_l2(off.dk, on.dk), 1e-13);
  EXPECT_LT(testing::relative_l2(off.dv, on.dv), 1e-13);

  AttentionShape s = c.shape;
  s.round_scores = s.round_softmax = true;
  const MemKind w = MemKind::Workspace;
  // Scores of about +-5 here: the finite differences' error stays far below the tolerance.
  auto scaled = [](const Tensor& t, double f) {
    Tensor r = Tensor::empty(t.shape(), DType::F64);
    for (int64_t i = 0; i < t.numel(); ++i) set_from_double(r, i, f * get_as_double(t, i));
    return r;
  };
  const Tensor q = scaled(c.q, 0.5), k = scaled(c.k, 0.5), v = scaled(c.v, 1.0);
  const Tensor r = scaled(c.dout, 1.0), seg = be.to_device(c.seg, w);
  const Tensor o = be.alloc(q.shape(), DType::F64, w);
  const Tensor lse = be.alloc({s.batch, s.num_heads, s.seq}, DType::F64, w);
  auto loss = [&] {
    be.attention_forward({.o = o, .lse = lse, .q = q, .k = k, .v = v, .segment_ids = seg,
                          .shape = s});
    return testing::inner(o, r);
  };
  loss();
  const Tensor dq = be.alloc(q.shape(), DType::F64, w), dk = be.alloc(k.shape(), DType::F64, w),
               dv = be.alloc(v.shape(), DType::F64, w);
  be.attention_backward({.dq = dq, .dk = dk, .dv = dv, .dout = r, .q = q, .k = k, .v = v, .o = o,
                         .lse = lse, .segment_ids = seg, .shape = s});
  testing::expect_grad_matches_fd("dq", q, dq, loss, 24);
  testing::expect_grad_matches_fd("dk", k, dk, loss, 24);
  testing::expect_grad_matches_fd("dv", v, dv, loss, 24);
}

// The bf16 path's output and gradients stay near the fp64 attention's, as bf16 allows:
// measured 0.54% (o), 1.5% and 1.4% (dq, dk: each score's gradient subtracts two bf16 values of
// like size), 0.61% (dv).
TEST(AttentionBf16Softmax, Bf16StaysNearFp64) {
  ReferenceBackend be;
  const AttentionCase c(16, 12);
  const AttentionRun on = c.run(be, true, true), exact = c.run(be, false, false, DType::F64);
  EXPECT_LT(testing::relative_l2(exact.o, on.o), 0.02);
  EXPECT_LT(testing::relative_l2(exact.dq, on.dq), 0.05);
  EXPECT_LT(testing::relative_l2(exact.dk, on.dk), 0.05);
  EXPECT_LT(testing::relative_l2(exact.dv, on.dv), 0.02);
  ::testing::Test::RecordProperty("o", std::to_string(testing::relative_l2(exact.o, on.o)));
  ::testing::Test::RecordProperty("dq", std::to_string(testing::relative_l2(exact.dq, on.dq)));
  ::testing::Test::RecordProperty("dk", std::to_string(testing::relative_l2(exact.dk, on.dk)));
  ::testing::Test::RecordProperty("dv", std::to_string(testing::relative_l2(exact.dv, on.dv)));
}

// The cpu backend computes the same roundings, its sums and products in fp32 as XLA's (the
// reference's in fp64, rounded once): its results are the reference's but for a rounding that
// an fp32 sum tips, far from what the softmax's rounding changes (measured: identical at
// head_dim 16 but 0.01% of dv; 0.004-0.013% apart at 128, where the softmax moves them 0.25-1.8%).
TEST(AttentionBf16Softmax, CpuAgreesWithTheReference) {
  ReferenceBackend ref;
  auto cpu = make_backend(options_of("cpu"));
  const char* names[] = {"o", "dq", "dk", "dv"};
  const Tensor AttentionRun::*outs[] = {&AttentionRun::o, &AttentionRun::dq, &AttentionRun::dk,
                                        &AttentionRun::dv};
  for (int64_t hd : {16, 128}) {
    const AttentionCase c(hd, 12);
    const AttentionRun r_on = c.run(ref, true, true), r_off = c.run(ref, true);
    const AttentionRun k_on = c.run(*cpu, true, true), k_off = c.run(*cpu, true);
    for (int n = 0; n < 4; ++n) {
      const Tensor AttentionRun::*x = outs[n];
      const double change = testing::relative_l2(r_off.*x, r_on.*x);
      const double agree = testing::relative_l2(r_on.*x, k_on.*x);
      const double same = 1.0 - double(count_different(r_on.*x, k_on.*x)) / double((r_on.*x).numel());
      EXPECT_LT(agree, 0.1 * change) << "hd " << hd << " " << names[n];
      EXPECT_GT(same, 0.9) << "hd " << hd << " " << names[n];
      EXPECT_GT(testing::relative_l2(k_off.*x, k_on.*x), 0.5 * change) << names[n];
      ::testing::Test::RecordProperty(str_cat(names[n], " hd ", hd, " change"),
                                      std::to_string(change));
      ::testing::Test::RecordProperty(str_cat(names[n], " hd ", hd, " cpu"), std::to_string(agree));
    }
  }
}

// The cuda backend does not build it and says so, naming the keys.
TEST(AttentionBf16Softmax, CudaRefusesIt) {
  auto be = make_backend(options_of("cuda_emulated"));
  const AttentionCase c(16, 12);
  testing::expect_error([&] { c.run(*be, true, true); },
                        {"float32_qk_product=false and float32_logits=false", "float32_logits=true"});
}

// The keys as a run reads them: dot_product honours the two keys, flash and autoselected keep
// fp32 scores, and the combination gemmax does not build is refused with the keys to change.
TEST(PrecisionKeysConfig, AttentionKeys) {
  auto opts = [](std::vector<std::string> keys) {
    return memory_plan_input(Config::defaults(keys), 1).options;
  };
  EXPECT_FALSE(opts({}).attention_bf16_scores);
  EXPECT_FALSE(opts({"attention=flash", "float32_logits=true"}).attention_bf16_scores);
  EXPECT_TRUE(opts({"attention=dot_product", "float32_logits=true"}).attention_bf16_scores);
  EXPECT_FALSE(opts({"attention=dot_product", "float32_qk_product=true"}).attention_bf16_scores);
  EXPECT_FALSE(opts({"attention=dot_product", "float32_logits=true"}).attention_bf16_softmax);
  EXPECT_TRUE(opts({"attention=dot_product"}).attention_bf16_softmax);
  EXPECT_TRUE(opts({"attention=dot_product"}).attention_bf16_scores);
  EXPECT_FALSE(opts({}).attention_bf16_softmax);
  EXPECT_FALSE(opts({"attention=dot_product", "float32_qk_product=true"}).attention_bf16_softmax);
  testing::expect_error([&] { opts({"attention=dot_product", "backend=cuda"}); },
                        {"float32_qk_product=false and float32_logits=false", "backend=cuda",
                         "float32_logits=true"});
  testing::expect_error([&] { opts({"attention=cudnn_flash_te"}); },
                        {"attention='cudnn_flash_te'", "dot_product"});
  const ModelOptions d = opts({});
  EXPECT_TRUE(d.activations_in_float32);
  EXPECT_TRUE(d.float32_weight_sum);
  EXPECT_FALSE(d.float32_gate_logits);
  const ModelOptions m = opts(
      {"activations_in_float32=false", "float32_weight_sum=false", "float32_gate_logits=true"});
  EXPECT_FALSE(m.activations_in_float32);
  EXPECT_FALSE(m.float32_weight_sum);
  EXPECT_TRUE(m.float32_gate_logits);
  testing::expect_error(
      [&] { memory_plan_input(Config::defaults({"float32_gate_logits=true"}), 2); },
      {"float32_gate_logits=true", "FSDP", "float32_gate_logits=false"});
}

// ---- the switches in the whole model -------------------------------------------------------

struct ModelRun {
  double loss;
  Tensor grads;
};

// One forward and backward of a small MoE model whose two experts are both chosen by every
// token (E = K: no top-k choice that a rounding could flip), on `be`.
ModelRun model_run(Backend& be, DType act, const ModelOptions& switches) {
  ModelConfig cfg = testing::small_test_config(2);
  cfg.d_model = 32;
  cfg.vocab_size = 64;
  cfg.num_experts = 2;
  const ParamTable table(cfg);
  const Tensor host_w = testing::trained_like_weights(table, 0.0, 0);
  Tensor w32 = Tensor::empty({table.total()}, act == DType::F64 ? DType::F64 : DType::F32);
  for (int64_t i = 0; i < w32.numel(); ++i) set_from_double(w32, i, get_as_double(host_w, i));
  const Tensor w = be.to_device(w32, MemKind::Params);
  const Tensor g = be.zeros({table.total()}, w32.dtype(), MemKind::Grads);
  const StepInputs in = upload_batch(be, testing::make_batch(2, 16, cfg.vocab_size, 5, 9));
  ModelOptions o = switches;
  o.act = act;
  o.remat = RematPolicy::Full;
  const LossInfo info = Gemma4Model(cfg, be, o).forward_backward(in, w, g);
  return {info.total_loss, host_copy(be, g)};
}

struct Switch {
  const char* key;
  void (*set)(ModelOptions&);
  bool fp64_bits = true;  // an fp64 run keeps every bit (else: the same to rounding)
  bool cuda = true;       // built on the cuda backend
};
const Switch kSwitches[] = {
    {"activations_in_float32=false", [](ModelOptions& o) { o.activations_in_float32 = false; }},
    {"float32_weight_sum=false", [](ModelOptions& o) { o.float32_weight_sum = false; }},
    {"float32_gate_logits=true", [](ModelOptions& o) { o.float32_gate_logits = true; }},
    {"attention=dot_product float32_logits=true",
     [](ModelOptions& o) { o.attention_bf16_scores = true; }},
    {"attention=dot_product (MaxText's bf16 softmax)",
     [](ModelOptions& o) { o.attention_bf16_softmax = true; }, false, false},
};

// In fp64 (the finite-difference and PyTorch parity runs) no switch changes a bit: there is no
// narrower dtype to round to, so those checks hold with either value. The bf16 softmax's plain
// rows sum in another order than flash attention: the same to rounding.
TEST(PrecisionSwitchesModel, ChangeNothingInFp64) {
  ReferenceBackend be;
  const ModelRun base = model_run(be, DType::F64, {});
  for (const Switch& s : kSwitches) {
    ModelOptions o;
    s.set(o);
    const ModelRun r = model_run(be, DType::F64, o);
    if (!s.fp64_bits) {
      EXPECT_NEAR(r.loss, base.loss, 1e-14 * base.loss) << s.key;
      EXPECT_LT(testing::relative_l2(base.grads, r.grads), 1e-12) << s.key;
      continue;
    }
    EXPECT_EQ(r.loss, base.loss) << s.key;
    EXPECT_EQ(count_different(r.grads, base.grads), 0) << s.key;
  }
}

class PrecisionSwitchesModelKernels : public ::testing::TestWithParam<const char*> {};

// Each switch changes a bf16 step on the reference backend (the loss and the gradients) and on
// the kernels by a like amount, and with it the kernels' step stays within bf16's distance of
// the reference's and the gradients as close to fp32 as bf16's are (bf16_test.cc's 0.1 bound).
// Measured (2 layers, E = K = 2): the switches move the gradients by 1.4-2.5%; the CUDA kernels
// (the plain ones at these sizes) reproduce the reference's to 2e-6, the cpu kernels, whose
// bf16 attention and products round where the reference does not, to 2.7% with or without a
// switch. The ops' own tests above check each rounding on the kernels.
TEST_P(PrecisionSwitchesModelKernels, AgreeWithTheReference) {
  ReferenceBackend ref;
  auto be = make_backend(options_of(GetParam()));
  const ModelRun f32 = model_run(ref, DType::F32, {});
  const ModelRun off = model_run(ref, DType::BF16, {}), k_off = model_run(*be, DType::BF16, {});
  for (const Switch& s : kSwitches) {
    if (!s.cuda && std::string(GetParam()) == "cuda_emulated") continue;  // refused there
    ModelOptions o;
    s.set(o);
    const ModelRun r = model_run(ref, DType::BF16, o), k = model_run(*be, DType::BF16, o);
    const double change = testing::relative_l2(off.grads, r.grads);
    const double agree = testing::relative_l2(r.grads, k.grads);
    const double kernel_change = testing::relative_l2(k_off.grads, k.grads);
    EXPECT_NE(r.loss, off.loss) << s.key;
    EXPECT_GT(change, 0) << s.key;
    EXPECT_GT(kernel_change, 0.25 * change) << s.key << " " << GetParam();
    EXPECT_LT(agree, 0.1) << s.key << " " << GetParam();
    EXPECT_NEAR(k.loss, r.loss, 1e-3 * r.loss) << s.key << " " << GetParam();
    EXPECT_LT(testing::relative_l2(f32.grads, r.grads), 0.1) << s.key;
    ::testing::Test::RecordProperty(std::string(s.key) + " change", std::to_string(change));
    ::testing::Test::RecordProperty(std::string(s.key) + " kernels", std::to_string(agree));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PrecisionSwitchesModelKernels,
                         ::testing::Values("cpu", "cuda_emulated"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace gemmax

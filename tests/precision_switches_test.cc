// MaxText's precision keys as switches (docs/TRAINING.md §1.2): each one, on, brings a bf16 run
// closer to the fp64 reference than it is off, on the reference backend (ground truth of the
// arithmetic), on the cpu backend (its fast kernels) and on the cuda kernels (their host emulator).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/head.h"
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

}  // namespace
}  // namespace gemmax

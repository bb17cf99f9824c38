// The whole model on the cuda backend's kernels: loss and gradients against the reference
// backend (float32 closely, bfloat16 within the bf16 tests' criterion), a training run's memory
// plan against what it measures, and resume bit for bit. Runs on the kernels' host emulator
// (cuda_emulated) everywhere and on the GPU (cuda) where one is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda_module.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/train/trainer.h"
#include "model_gradients.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::TempDir;

// bench/gpu_check.sh runs the GPU tests with every launch checked, naming a faulting kernel.
bool sync_check() { return std::getenv("GEMMAX_TEST_CUDA_SYNC_CHECK") != nullptr; }

class ModelOnKernels : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    name = std::string(GetParam()) == "gpu" ? "cuda" : "cuda_emulated";
    if (name == "cuda") {
      std::string why;
      if (!cuda::cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    }
  }
  std::string name;
};

TEST_P(ModelOnKernels, LossAndGradientsMatchTheReference) {
  for (int64_t experts : {5, 2, 1}) {  // 1: the dense layer (gemma4-31b)
    ModelConfig cfg = testing::small_test_config(2);
    cfg.d_model = 32;
    cfg.vocab_size = 64;
    cfg.num_experts = experts;
    const ParamTable table(cfg);
    const Batch batch = testing::make_batch(2, 16, cfg.vocab_size, 5, 9);
    ReferenceBackend ref;
    BackendOptions o;
    o.name = name;
    o.cuda_sync_check = sync_check();
    auto be = make_backend(o);
    const Tensor w = testing::trained_like_weights(table, 0.0, 0);
    LossInfo lr, lk, lkb, ln;
    const Tensor gr = testing::model_gradients(ref, cfg, batch, DType::F32, w, &lr);
    const Tensor gk = testing::model_gradients(*be, cfg, batch, DType::F32, w, &lk);
    EXPECT_NEAR(lk.total_loss, lr.total_loss, 1e-6 * lr.total_loss) << experts << " experts";
    EXPECT_LE(testing::relative_l2(gr, gk), 1e-5) << experts << " experts, float32";
    // bfloat16 on the kernels: as close to fp32 as fp32 is to itself under a bf16 rounding of
    // every weight (the criterion of model/bf16_test.cc).
    const Tensor gkb = testing::model_gradients(*be, cfg, batch, DType::BF16, w, &lkb);
    const Tensor gn = testing::model_gradients(ref, cfg, batch, DType::F32,
                                testing::trained_like_weights(table, std::ldexp(1.0, -9), 11), &ln);
    const double bf16_err = testing::relative_l2(gr, gkb), noise_err = testing::relative_l2(gr, gn);
    EXPECT_NEAR(lkb.total_loss, lr.total_loss, 1e-2 * lr.total_loss) << experts << " experts";
    // What the bf16 arithmetic adds, apart from the rounding of the matrices bf16 computes with:
    // against fp32 on those rounded matrices, within the same bounds. On the dense layer at this
    // size (d_model 32, MLP 20) the rounding of the matrices alone, with no bf16 arithmetic,
    // moves the fp32 gradient by 0.081, twice the one noise draw above (0.038; 16 draws: mean
    // 0.060, max 0.092), so the whole error (0.128) cannot meet 3 x noise there; the arithmetic's
    // share is 0.072. At d_model 64 or MLP 64 the same dense layer's whole error is 0.023-0.028.
    LossInfo lw;
    const Tensor gw = testing::model_gradients(ref, cfg, batch, DType::F32,
                                               testing::bf16_rounded_matrices(table, w), &lw);
    const double arith_err = testing::relative_l2(gw, gkb);
    EXPECT_LE(arith_err, 3 * noise_err) << experts << " experts, against the rounded matrices";
    EXPECT_LE(arith_err, 0.1) << experts << " experts, against the rounded matrices";
    ::testing::Test::RecordProperty("bf16_arith_error_E" + std::to_string(experts),
                                    std::to_string(arith_err));
    if (experts == 1) {
      // and the kernels reproduce the reference backend's bf16 gradients
      ReferenceBackend ref_bf16;
      LossInfo lrb;
      const Tensor grb = testing::model_gradients(ref_bf16, cfg, batch, DType::BF16, w, &lrb);
      EXPECT_LE(testing::relative_l2(grb, gkb), 1e-3) << "dense, bf16 kernels vs bf16 reference";
      continue;
    }
    EXPECT_LE(bf16_err, 3 * noise_err) << experts << " experts";
    EXPECT_LE(bf16_err, 0.1) << experts << " experts";
    ::testing::Test::RecordProperty("bf16_grad_error_E" + std::to_string(experts),
                                    std::to_string(bf16_err));
  }
}

std::vector<std::string> run_args(const TempDir& dir, const std::string& backend, int64_t steps,
                                  std::vector<std::string> extra = {}) {
  std::vector<std::string> v = {"base_output_directory=" + dir.str(),
                                "run_name=r",
                                "backend=" + backend,
                                std::string("cuda_sync_check=") + (sync_check() ? "true" : "false"),
                                "base_emb_dim=32",
                                "max_target_length=32",
                                "per_device_batch_size=2",
                                "learning_rate=1e-2",
                                "learning_rate_schedule_steps=8",
                                "log_period=1000",
                                "sample_max_new_tokens=0",
                                "eval_interval=-1",  // the step's own code: not re-run here
                                "steps=" + std::to_string(steps)};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

std::vector<double> losses_of(const TempDir& dir) {
  std::ifstream in(dir / "r/metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);)
    losses.push_back(nlohmann::json::parse(line)["learning/loss"].get<double>());
  return losses;
}

std::vector<uint8_t> host_bytes(Trainer& t) {
  const Tensor h = t.model().backend().to_host(t.weights());
  const auto* p = static_cast<const uint8_t*>(h.raw());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// The plan derived from the model's allocations (the backend's scratch included) equals what a
// step measures, category by category.
TEST_P(ModelOnKernels, MemoryPlanEqualsMeasured) {
  for (const char* dtype : {"bfloat16", "float32"}) {
    TempDir dir;
    Trainer t(Config::defaults(run_args(dir, name, 1, {std::string("dtype=") + dtype})));
    std::ostringstream log;
    t.run(log);
    const MemoryPlan& plan = t.memory_plan();
    for (size_t k = 0; k < kNumMemKinds; ++k)
      EXPECT_EQ(plan.peak[k], int64_t(MemoryTracker::global().peak(MemKind(k))))
          << dtype << ": " << mem_kind_name(MemKind(k)) << "\n"
          << log.str();
    EXPECT_EQ(plan.peak_total, int64_t(MemoryTracker::global().peak_total())) << dtype;
  }
}

TEST_P(ModelOnKernels, ResumedRunEqualsUninterruptedBitForBit) {
  // HF's smaller initialisation: under MaxText's, learning_rate=1e-2 on this tiny model makes
  // the bf16 trajectories of two correct backends part by a few percent within 3 steps.
  const std::vector<std::string> hf_init = {"init_scheme=hf"};
  TempDir whole, split;
  Trainer a(Config::defaults(run_args(whole, name, 4, hf_init)));
  std::ostringstream log;
  a.run(log);
  {  // ended before the resume: a run folder has one owner at a time
    Trainer first(Config::defaults(run_args(split, name, 2, hf_init)));
    first.run(log);
  }
  Trainer resumed(Config::defaults(run_args(split, name, 4, hf_init)));
  EXPECT_EQ(resumed.start_step(), 2);
  resumed.run(log);
  EXPECT_EQ(losses_of(whole), losses_of(split));
  EXPECT_EQ(host_bytes(a), host_bytes(resumed));
  // And the losses fall as they do on the reference backend, to a few bf16 roundings.
  TempDir ref_dir;
  Trainer r(Config::defaults(run_args(ref_dir, "reference", 4, hf_init)));
  r.run(log);
  const std::vector<double> lr = losses_of(ref_dir), lk = losses_of(whole);
  ASSERT_EQ(lr.size(), lk.size());
  for (size_t i = 0; i < lr.size(); ++i) EXPECT_NEAR(lk[i], lr[i], 2e-2 * lr[i]) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(Backends, ModelOnKernels, ::testing::Values("emulated", "gpu"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace gemmax

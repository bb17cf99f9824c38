// Memory discipline: the plan against the measured peaks, what full remat saves, the one-tile
// bound of the vocabulary-tiled head (and its equality with the untiled head), the plan of the
// real model, and runs refused before any step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/config/config.h"
#include "gemmax/parallel/fsdp.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/head.h"
#include "gemmax/train/memory_budget.h"
#include "gemmax/train/memory_plan.h"
#include "gemmax/train/trainer.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::TempDir;

MemoryTracker& tracker() { return MemoryTracker::global(); }

// The tiny preset's structure (5 sliding + 1 global layer) at a width that steps in a blink.
std::vector<std::string> small_run(const TempDir& dir, std::vector<std::string> extra) {
  std::vector<std::string> v = {"base_output_directory=" + dir.str(), "run_name=m",
                                "base_emb_dim=32", "max_target_length=32",
                                "per_device_batch_size=2", "steps=1", "log_period=1000",
                                // The plan covers training steps; the end-of-run sample (KV
                                // cache, compute copies) would add to the measured peaks.
                                "sample_max_new_tokens=0"};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

// Every category's measured peak over a training step equals the plan, byte for byte, for each
// backend, remat policy, dtype and tiling: the plan is what the model allocates on that backend.
TEST(MemoryPlan, MatchesMeasuredPeaksOfATrainingStep) {
  struct Case {
    const char *backend, *dtype, *remat;
    int tiles;
  };
  for (const Case& c : {Case{"cpu", "bfloat16", "none", 1}, Case{"cpu", "bfloat16", "minimal", 2},
                        Case{"cpu", "bfloat16", "full", 4}, Case{"cpu", "float32", "full", 1},
                        Case{"cpu", "float32", "minimal", 8}, Case{"reference", "bfloat16", "full", 4},
                        Case{"reference", "float32", "none", 1}}) {
    TempDir dir;
    Trainer t(Config::defaults(small_run(
        dir, {std::string("backend=") + c.backend, std::string("dtype=") + c.dtype,
              std::string("remat_policy=") + c.remat, "num_vocab_tiling=" + std::to_string(c.tiles)})));
    std::ostringstream log;
    t.run(log);
    const MemoryPlan& plan = t.memory_plan();
    const std::string what = std::string(c.backend) + " " + c.dtype + " " + c.remat + " tiles " +
                             std::to_string(c.tiles);
    for (size_t k = 0; k < kNumMemKinds; ++k)
      EXPECT_EQ(plan.peak[k], int64_t(tracker().peak(MemKind(k))))
          << what << ": " << mem_kind_name(MemKind(k)) << "\n"
          << log.str();
    EXPECT_EQ(plan.peak_total, int64_t(tracker().peak_total())) << what;
    // The run prints the plan beside the measured peaks.
    EXPECT_NE(log.str().find("measured peak"), std::string::npos);
  }
}

// The dense layer (gemma4-31b's, num_experts=1): plan = measured on both backends, and the plan
// holds no router or expert buffers.
TEST(MemoryPlan, DenseModelMatchesMeasuredPeaks) {
  for (const char* backend : {"cpu", "reference"})
    for (const char* remat : {"none", "minimal", "full"}) {
      TempDir dir;
      Trainer t(Config::defaults(small_run(dir, {std::string("backend=") + backend,
                                                 std::string("remat_policy=") + remat,
                                                 "num_experts=1", "num_vocab_tiling=2"})));
      std::ostringstream log;
      t.run(log);
      EXPECT_NE(log.str().find("| dense |"), std::string::npos) << log.str();
      const MemoryPlan& plan = t.memory_plan();
      for (size_t k = 0; k < kNumMemKinds; ++k)
        EXPECT_EQ(plan.peak[k], int64_t(tracker().peak(MemKind(k))))
            << backend << " " << remat << ": " << mem_kind_name(MemKind(k)) << "\n"
            << log.str();
      EXPECT_EQ(plan.peak_total, int64_t(tracker().peak_total())) << backend << " " << remat;
    }
}

// The small block (gemma4-e2b/e4b's): plan = measured on both backends under every remat policy,
// per-layer inputs, shared K/V (layers 4 and 5 read layers 3 and 2) and double-wide MLPs included.
std::vector<std::string> small_block_keys() {
  return {"decoder_block=gemma4_small", "num_experts=1",          "sliding_window_pattern=3",
          "hidden_size_per_layer_input=8", "vocab_size_per_layer_input=259",
          "num_kv_shared_layers=2",     "use_double_wide_mlp=true"};
}

TEST(MemoryPlan, SmallBlockMatchesMeasuredPeaks) {
  for (const char* backend : {"cpu", "reference"})
    for (const char* remat : {"none", "minimal", "full"}) {
      TempDir dir;
      std::vector<std::string> keys = small_block_keys();
      keys.insert(keys.end(), {std::string("backend=") + backend,
                               std::string("remat_policy=") + remat, "num_vocab_tiling=2"});
      Trainer t(Config::defaults(small_run(dir, keys)));
      std::ostringstream log;
      t.run(log);
      const MemoryPlan& plan = t.memory_plan();
      for (size_t k = 0; k < kNumMemKinds; ++k)
        EXPECT_EQ(plan.peak[k], int64_t(tracker().peak(MemKind(k))))
            << backend << " " << remat << ": " << mem_kind_name(MemKind(k)) << "\n"
            << log.str();
      EXPECT_EQ(plan.peak_total, int64_t(tracker().peak_total())) << backend << " " << remat;
    }
}

// Under full remat a layer keeps only its input: two more layers add exactly two [T, D]
// tensors of saved activations; without remat they add all their internals.
TEST(MemoryPlan, FullRematSavesOnlyTheLayerInputPerLayer) {
  ReferenceBackend be;
  const Batch batch = testing::make_batch(2, 8, 37, 3);
  const StepInputs in = upload_batch(be, batch);
  const int64_t T = in.tokens_count();
  auto saved_peak = [&](int64_t layers, RematPolicy p, DType act) {
    const ModelConfig cfg = testing::small_test_config(layers);
    Gemma4Model model(cfg, be, {act, p, 1});
    const DType wdt = act == DType::BF16 ? DType::F32 : act;
    Tensor w = Tensor::zeros({model.params().total()}, wdt, MemKind::Params);
    init_params(model.params(), w, 1);
    Tensor g = Tensor::zeros({model.params().total()}, wdt, MemKind::Grads);
    const size_t before = tracker().current(MemKind::Activations);
    tracker().reset_peaks();
    model.forward_backward(in, w, g);
    const int64_t measured = int64_t(tracker().peak(MemKind::Activations) - before);
    const MemoryPlanInput pin{cfg, in.batch, in.seq, {act, p, 1}, wdt};
    EXPECT_EQ(plan_memory(pin, be).peak[size_t(MemKind::Activations)], measured);
    return measured;
  };
  for (DType act : {DType::F32, DType::BF16}) {
    const int64_t x = T * 16 * int64_t(dtype_size(act));  // one [T, D] layer input
    EXPECT_EQ(saved_peak(4, RematPolicy::Full, act) - saved_peak(2, RematPolicy::Full, act), 2 * x);
    const int64_t none =
        saved_peak(4, RematPolicy::None, act) - saved_peak(2, RematPolicy::None, act);
    const int64_t minimal =
        saved_peak(4, RematPolicy::Minimal, act) - saved_peak(2, RematPolicy::Minimal, act);
    EXPECT_GT(minimal, 2 * x);
    EXPECT_GT(none, minimal);
  }
}

// The head's workspace is one tile: [C, V] logits plus [C, D] buffers, C = B*S / N. It does
// not grow with vocabulary x tokens: doubling the sequence with twice the tiles keeps it.
TEST(MemoryPlan, TiledHeadWorkspaceIsOneTile) {
  ReferenceBackend be;
  for (DType act : {DType::F32, DType::BF16}) {
    for (int64_t V : {64, 512}) {
      ModelConfig cfg = testing::small_test_config(1);
      cfg.vocab_size = V;
      const int64_t D = cfg.d_model;
      auto head_peak = [&](int64_t S, int64_t N) {
        const StepInputs in = upload_batch(be, testing::make_batch(2, S, V, 4));
        Rng rng(1);
        const Tensor x = testing::random_tensor({in.tokens_count(), D}, rng, 1.0, act);
        const HeadWeights w{testing::random_tensor({V, D}, rng, 0.1, act),
                            testing::random_tensor({D}, rng, 1.0, DType::F32)};
        const HeadWeights g{Tensor::zeros({V, D}, DType::F32), Tensor::zeros({D}, DType::F32)};
        const Tensor dx = Tensor::empty({in.tokens_count(), D}, act);
        const Tensor loss = Tensor::zeros({1}, DType::F64);
        const size_t before = tracker().current(MemKind::Workspace);
        tracker().reset_peaks();
        head_loss(be, cfg, in, {act, RematPolicy::Full, N}, w, x, 0.1, loss, &g, &dx);
        return int64_t(tracker().peak(MemKind::Workspace) - before);
      };
      const int64_t a = int64_t(dtype_size(act)), s = 4;
      for (int64_t N : {1, 4, 16}) {
        const int64_t C = 2 * 64 / N;
        const int64_t expect = C * V * a + 2 * C * D * a + C * s + 2 * C * 4;
        EXPECT_EQ(head_peak(64, N), expect) << "V " << V << " N " << N;
        if (N > 1) EXPECT_LT(head_peak(64, N), 2 * 64 * V * a / 2) << "a [T, V] buffer exists";
      }
      EXPECT_EQ(head_peak(128, 8), head_peak(64, 4)) << "tile size fixed, tokens doubled";
    }
  }
}

// The tiled head gives the untiled result: loss equal to the explicit [T, V] computation,
// gradients equal to the single-tile head (fp64 to 1e-12, fp32 to 1e-6 relative).
class TiledHeadThreads : public testing::WithThreads {};

TEST_P(TiledHeadThreads, TiledHeadEqualsUntiled) {
  ReferenceBackend be;
  ModelConfig cfg = testing::small_test_config(1);
  const int64_t D = cfg.d_model, V = cfg.vocab_size, B = 3, S = 16, T = B * S;
  const StepInputs in = upload_batch(be, testing::make_batch(B, S, V, 8, 11));
  for (DType act : {DType::F64, DType::F32}) {
    Rng rng(2);
    const Tensor x = testing::random_tensor({T, D}, rng, 1.0, act);
    const HeadWeights w{testing::random_tensor({V, D}, rng, 2.0, act),
                        testing::random_tensor({D}, rng, 1.0, act)};
    struct Out {
      double loss;
      Tensor dx, demb, dnorm;
    };
    auto run = [&](int64_t N) {
      Out o{0, Tensor::zeros({T, D}, act), Tensor::zeros({V, D}, act), Tensor::zeros({D}, act)};
      const HeadWeights g{o.demb, o.dnorm};
      const Tensor loss = Tensor::zeros({1}, DType::F64);
      head_loss(be, cfg, in, {act, RematPolicy::Full, N}, w, x, 0.5, loss, &g, &o.dx);
      o.loss = get_as_double(loss, 0);
      return o;
    };
    const double tol = act == DType::F64 ? 1e-12 : 1e-6;
    // The simple path: every logit at once, cross-entropy written out.
    const Tensor logits = head_logits(be, cfg, {act}, w, x);
    double explicit_loss = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (in.target_mask.data<int32_t>()[t] == 0) continue;
      double mx = -1e300, sum = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, get_as_double(logits, t * V + v));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(get_as_double(logits, t * V + v) - mx);
      explicit_loss +=
          mx + std::log(sum) - get_as_double(logits, t * V + in.targets.data<int32_t>()[t]);
    }
    const Out one = run(1);
    EXPECT_NEAR(one.loss, explicit_loss, tol * explicit_loss) << dtype_name(act);
    for (int64_t N : {2, 4, 8, 16}) {
      const Out o = run(N);
      EXPECT_NEAR(o.loss, one.loss, tol * one.loss) << dtype_name(act) << " N " << N;
      const std::pair<Tensor, Tensor> grads[] = {
          {one.dx, o.dx}, {one.demb, o.demb}, {one.dnorm, o.dnorm}};
      for (const auto& [a, b] : grads) {
        double scale = 0;
        for (int64_t i = 0; i < a.numel(); ++i)
          scale = std::max(scale, std::abs(get_as_double(a, i)));
        EXPECT_LE(testing::max_abs_diff(a, b), tol * scale)
            << a.str() << " " << dtype_name(act) << " N " << N;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MemoryPlan, TiledHeadThreads, ::testing::Values(1, 2),
                         testing::threads_name);

// The seed workload: Gemma4-26B-A4B, seq 16384, per-device batch 2, FSDP-128, full remat,
// bf16. Planned by running rank 0's sharded step on a planning comm, without allocating; the
// MaxText run fits a 32 GiB v6e chip.
TEST(MemoryPlan, SeedWorkloadOfTheRealModel) {
  const Config c = Config::defaults({"model_name=gemma4-26b-a4b", "per_device_batch_size=2",
                                     "max_target_length=16384", "ici_fsdp_parallelism=128",
                                     "num_vocab_tiling=16"});
  const MemoryPlanInput in = memory_plan_input(c);
  EXPECT_EQ(in.options.act, DType::BF16);
  EXPECT_EQ(in.options.remat, RematPolicy::Full);
  ReferenceBackend be;
  const MemoryPlan p = plan_memory(in, be);
  const int64_t T = 2 * 16384, D = 2816;
  EXPECT_EQ(p.peak[size_t(MemKind::Activations)], 31 * T * D * 2) << "30 layer inputs + the head's";
  // 25.23B parameters in 128 shards, fp32 (norm scales replicated).
  EXPECT_NEAR(double(p.peak[size_t(MemKind::Params)]), 25233141790.0 * 4 / 128, 4e6);
  EXPECT_EQ(p.peak[size_t(MemKind::OptState)], 2 * p.peak[size_t(MemKind::Params)]);
  EXPECT_LT(p.peak_total, int64_t(32) << 30);
  EXPECT_GT(p.peak_total, int64_t(16) << 30);
  EXPECT_EQ(p.peak_phase[size_t(MemKind::Workspace)].rfind("backward of layer", 0), 0u);
  // 4.2M tokens per global batch against 262144 vocabulary rows: gathering the table moves less.
  EXPECT_EQ(in.fsdp_options.embedding, EmbeddingMode::Gather);
  // Each layer is gathered twice (forward, backward) in bf16 and reduce-scattered once in fp32:
  // about 2 x 2 + 4 bytes per parameter, plus the embedding.
  EXPECT_NEAR(double(p.comm.all_gather_bytes), 25.23e9 * 4, 0.06 * 25.23e9 * 4);
  EXPECT_NEAR(double(p.comm.reduce_scatter_bytes), 25.23e9 * 4, 0.06 * 25.23e9 * 4);
  // Sharding the small vectors (seed change 1, small vectors replicated, turned off:
  // docs/FSDP.md#the-seeds-sharding-choices) adds a gather per layer pass and a reduce-scatter per
  // layer, for few bytes.
  const Config unreplicated = Config::defaults(
      {"model_name=gemma4-26b-a4b", "per_device_batch_size=2", "max_target_length=16384",
       "ici_fsdp_parallelism=128", "num_vocab_tiling=16", "fsdp_replicate_small_params=false"});
  const MemoryPlan s = plan_memory(memory_plan_input(unreplicated), be);
  EXPECT_EQ(s.comm.collectives - p.comm.collectives, 3 * 30 + 2 - 1)
      << "2 gathers and a reduce-scatter per layer, the final norm's gather and reduce-scatter, no "
         "all-reduce";
  EXPECT_LT(s.comm.all_gather_bytes - p.comm.all_gather_bytes, int64_t(8) << 20);
  // Untiled, the head's [T, V] bf16 logits alone take 16 GiB.
  const Config untiled = Config::defaults({"model_name=gemma4-26b-a4b", "per_device_batch_size=2",
                                           "max_target_length=16384", "ici_fsdp_parallelism=128"});
  const MemoryPlan u = plan_memory(memory_plan_input(untiled), be);
  EXPECT_GE(u.peak[size_t(MemKind::Workspace)], int64_t(16) << 30);
}

// gemma4-31b, the dense member: 30.70B parameters (the MLP alone in each of 60 layers), planned
// for one rank of FSDP-64 at seq 8192, full remat, bf16.
TEST(MemoryPlan, DenseMemberOfTheRealSize) {
  const Config c = Config::defaults({"model_name=gemma4-31b", "per_device_batch_size=1",
                                     "max_target_length=8192", "ici_fsdp_parallelism=64",
                                     "num_vocab_tiling=8"});
  const MemoryPlanInput in = memory_plan_input(c);
  const ParamTable table(in.model);
  EXPECT_EQ(table.total(), 30697345340);
  int64_t small = 0;  // norm scales and layer_scalar: replicated on every rank
  for (const ParamSpec& s : table.specs()) small += s.fsdp == FsdpRole::SmallVector ? s.numel() : 0;
  ReferenceBackend be;
  const MemoryPlan p = plan_memory(in, be);
  const int64_t T = 8192, D = 5376;
  EXPECT_EQ(p.peak[size_t(MemKind::Activations)], 61 * T * D * 2) << "60 layer inputs + the head's";
  EXPECT_NEAR(double(p.peak[size_t(MemKind::Params)]), (30697345340.0 - small) * 4 / 64 + small * 4,
              1e5);
  EXPECT_EQ(p.peak[size_t(MemKind::OptState)], 2 * p.peak[size_t(MemKind::Params)]);
  // Each layer gathered twice in bf16 and reduce-scattered once in fp32, as for the MoE.
  EXPECT_NEAR(double(p.comm.all_gather_bytes), 30.70e9 * 4, 0.06 * 30.70e9 * 4);
  EXPECT_NEAR(double(p.comm.reduce_scatter_bytes), 30.70e9 * 4, 0.06 * 30.70e9 * 4);
}

TEST(MemoryPlan, BadSettingsAreRefusedBeforeAnyStep) {
  TempDir dir;
  auto make = [&](std::vector<std::string> extra) {
    return [&dir, extra] { Trainer t(Config::defaults(small_run(dir, extra))); };
  };
  testing::expect_error(make({"num_vocab_tiling=3"}),
                        {"num_vocab_tiling=3", "max_target_length=32", "use a divisor of 32"});
  testing::expect_error(make({"remat_policy=everything"}),
                        {"remat_policy='everything'", "full", "minimal", "none"});
  testing::expect_error(make({"weight_dtype=bfloat16"}),
                        {"dtype=bfloat16 with weight_dtype=bfloat16", "weight_dtype=float32"});
  testing::expect_error(make({"ici_fsdp_parallelism=4"}),
                        {"ici_fsdp_parallelism=4", "dry_run=true"});
  const std::string msg =
      testing::expect_error(make({"max_memory_gb=0.001", "remat_policy=none"}),
                            {"max_memory_gb=0.001", "remat_policy=full", "memory plan per device",
                             "activations", "workspace", "total"});
  EXPECT_FALSE(std::filesystem::exists(dir / "m")) << "a refused run left a run directory";
}

TEST(MemoryPlan, DryRunPrintsThePlanWithoutAllocating) {
  const std::string seed = std::string(GEMMAX_BINARY) +
                           " train model_name=gemma4-26b-a4b per_device_batch_size=2 "
                           "max_target_length=16384 ici_fsdp_parallelism=128 num_vocab_tiling=16 "
                           "dry_run=true";
  std::string out;
  ASSERT_EQ(testing::run_command(seed + " max_memory_gb=32", &out), 0) << out;
  for (const char* part : {"memory plan per device", "FSDP over 128 ranks",
                           "communication per step and rank", "fits in max_memory_gb=32"})
    EXPECT_NE(out.find(part), std::string::npos) << part << "\n" << out;
  out.clear();
  EXPECT_EQ(testing::run_command(seed + " max_memory_gb=8", &out), 1) << out;
  EXPECT_NE(out.find("max_memory_gb=8"), std::string::npos) << out;
  EXPECT_NE(out.find("memory plan per device"), std::string::npos) << out;
}

}  // namespace
}  // namespace gemmax

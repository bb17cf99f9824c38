// LoRA runs end to end (train/step.cc, train/trainer.cc): the adapters learn while the frozen
// base stays bit for bit; a run split at a checkpoint ends with the uninterrupted run's adapters;
// the memory plan equals the measured peaks; the run's PEFT folder holds its adapters; a run
// starts from a PEFT adapter; bad settings are refused before anything is written, naming the key.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gemmax/base/convert.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/checkpoint/peft_adapter.h"
#include "gemmax/model/lora/nf4_base.h"
#include "gemmax/train/trainer.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

const std::string kPeft = std::string(GEMMAX_SOURCE_DIR) + "/tests/reference/peft/fixtures";

MemoryTracker& tracker() { return MemoryTracker::global(); }

// The tiny preset's structure (5 sliding + 1 global layer, MoE) at a width that trains in
// seconds, with adapters on MaxText's gemma4 default (attention, MLP and experts).
std::vector<std::string> lora_run(const TempDir& dir, int64_t steps,
                                  std::vector<std::string> more = {}) {
  std::vector<std::string> v = {"base_output_directory=" + dir.str(),
                                "run_name=t",
                                "base_emb_dim=64",
                                "max_target_length=64",
                                "per_device_batch_size=4",
                                "learning_rate=1e-2",
                                "steps=" + std::to_string(steps),
                                "log_period=1000",
                                "learning_rate_schedule_steps=40",
                                "eval_interval=-1",
                                "sample_max_new_tokens=0",
                                "enable_lora=true",
                                "lora_rank=4",
                                "lora_alpha=8"};
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

std::vector<double> losses_of(const TempDir& dir) {
  std::ifstream in(dir / "t/metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);)
    losses.push_back(nlohmann::json::parse(line)["learning/loss"].get<double>());
  return losses;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(LoraTrain, AdaptersLearnAndTheBaseStaysBitForBit) {
  TempDir dir;
  Trainer t(Config::defaults(lora_run(dir, 40)));
  ASSERT_NE(t.adapters(), nullptr);
  const Tensor before = Tensor::empty(t.base_weights().shape(), t.base_weights().dtype());
  std::memcpy(before.raw(), t.base_weights().raw(), before.nbytes());
  EXPECT_EQ(before.dtype(), DType::BF16) << "the frozen base is kept in the compute dtype";
  std::ostringstream log;
  const TrainSummary s = t.run(log);
  const std::vector<double> losses = losses_of(dir);
  ASSERT_EQ(losses.size(), 40u);
  double tail = 0;
  for (size_t i = 30; i < 40; ++i) tail += losses[i] / 10;
  EXPECT_LT(tail, s.first_loss - 0.5) << log.str();
  EXPECT_TRUE(same_bytes(before, t.base_weights())) << "the base changed";
  EXPECT_NE(log.str().find("LoRA rank 4"), std::string::npos) << log.str();
}

TEST(LoraTrain, ARunSplitAtACheckpointEndsWithTheSameAdapters) {
  // Dropout on the dense matrices only: PEFT has none on the experts' adapters.
  const std::string dense = "lora_target_modules=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";
  for (const char* dropout : {"lora_dropout=0", "lora_dropout=0.1", "lora_weight_qtype=nf4"}) {
    TempDir whole, split;
    std::ostringstream log;
    const std::vector<std::string> keys = {dropout, dense};
    Trainer a(Config::defaults(lora_run(whole, 4, keys)));
    a.run(log);
    Trainer(Config::defaults(lora_run(split, 2, keys))).run(log);
    Trainer resumed(Config::defaults(lora_run(split, 4, keys)));
    EXPECT_EQ(resumed.start_step(), 2);
    resumed.run(log);
    EXPECT_TRUE(same_bytes(a.weights(), resumed.weights())) << dropout;
    EXPECT_EQ(losses_of(whole), losses_of(split)) << dropout;
  }
}

// The checkpoint holds the adapters, not the base: a resume on another base is refused.
TEST(LoraTrain, AResumeOnAnotherBaseIsRefused) {
  TempDir dir;
  std::ostringstream log;
  Trainer(Config::defaults(lora_run(dir, 2))).run(log);
  expect_error([&] { Trainer(Config::defaults(lora_run(dir, 4, {"init_weights_seed=5"}))); },
               {"other weights", "CRC-32C", "load_parameters_path"});
}

TEST(LoraTrain, MemoryPlanEqualsTheMeasuredPeaks) {
  for (const char* backend : {"cpu", "reference"})
    for (const char* remat : {"full", "none"})
      for (const char* q : {"none", "nf4"}) {
        TempDir dir;
        Trainer t(Config::defaults(
            lora_run(dir, 1,
                     {std::string("backend=") + backend, std::string("remat_policy=") + remat,
                      std::string("lora_weight_qtype=") + q})));
        std::ostringstream log;
        t.run(log);
        const MemoryPlan& plan = t.memory_plan();
        for (size_t k = 0; k < kNumMemKinds; ++k)
          EXPECT_EQ(plan.peak[k], int64_t(tracker().peak(MemKind(k))))
              << backend << " " << remat << ": " << mem_kind_name(MemKind(k)) << "\n"
              << log.str();
        // No gradient or moment of the base: those categories hold the adapters' alone.
        const int64_t n = t.adapters()->params().total();
        EXPECT_EQ(plan.peak[size_t(MemKind::Grads)], 4 * n);
        EXPECT_EQ(plan.peak[size_t(MemKind::OptState)], 2 * 4 * n);
        if (std::string(q) == "none")
          EXPECT_EQ(plan.peak[size_t(MemKind::Params)], int64_t(t.base_weights().nbytes()) + 4 * n);
      }
}

TEST(LoraTrain, TheRunsPeftFolderHoldsItsAdapters) {
  TempDir dir;
  Trainer t(Config::defaults(lora_run(dir, 2)));
  std::ostringstream log;
  t.run(log);
  const PeftAdapter a = read_peft_adapter(dir / "t/adapter", t.model().params(), DType::F32);
  EXPECT_TRUE(same_bytes(a.weights, t.weights()));
  EXPECT_EQ(a.shape.rank, 4);
  EXPECT_EQ(a.shape.alpha, 8.0);
  EXPECT_EQ(a.targets.size(), t.adapters()->targets().size());
}

// A QLoRA run's checkpoint reads back as the base its adapters were trained against: the base
// (streamed into NF4, its CRC-32C chained tensor by tensor) quantised and dequantised again.
TEST(LoraTrain, AQloraCheckpointReadsBackAsItsNf4Base) {
  TempDir dir;
  std::ostringstream log;
  Trainer t(Config::defaults(lora_run(dir, 1, {"lora_weight_qtype=nf4"})));
  t.run(log);
  const LoadedModel m = load_model_dir(dir / "t", DType::F32);
  ASSERT_TRUE(m.lora.has_value());
  const ParamTable& table = t.model().params();
  Tensor base = Tensor::empty({table.total()}, DType::BF16);
  init_params(table, base, 0);
  const Tensor want = convert_dtype(nf4_round_trip(table, base, 64, DType::BF16), DType::F32);
  EXPECT_TRUE(same_bytes(m.weights, want));
  EXPECT_TRUE(same_bytes(m.lora->weights, t.weights()));
}

// A run starts from a PEFT adapter (lora_restore_path) on the base it was made on.
TEST(LoraTrain, StartsFromAPeftAdapter) {
  TempDir dir;
  // The fixture's model (make_random_model.py's dense preset) in gemmax's keys.
  std::vector<std::string> args = {"base_output_directory=" + dir.str(),
                                   "run_name=t",
                                   "steps=1",
                                   "log_period=1000",
                                   "sample_max_new_tokens=0",
                                   "eval_interval=-1",
                                   "dataset_type=synthetic",
                                   "max_target_length=16",
                                   "per_device_batch_size=2",
                                   "enable_lora=true",
                                   "load_parameters_path=" + kPeft + "/dense/model",
                                   "lora_restore_path=" + kPeft + "/dense/lora",
                                   "base_num_decoder_layers=4",
                                   "sliding_window_pattern=4",
                                   "base_emb_dim=36",
                                   "base_num_query_heads=4",
                                   "base_num_kv_heads=2",
                                   "global_num_kv_heads=1",
                                   "head_dim=8",
                                   "global_head_dim=12",
                                   "base_mlp_dim=52",
                                   "num_experts=1",
                                   "vocab_size=151",
                                   "sliding_window_size=6"};
  // The adapter's rank and alpha are its own: lora_rank and lora_alpha are left unset.
  Trainer t(Config::defaults(args));
  const PeftAdapter a = read_peft_adapter(kPeft + "/dense/lora", t.model().params(), DType::F32);
  EXPECT_TRUE(same_bytes(a.weights, t.weights()));
  EXPECT_EQ(t.adapters()->shape().rank, 4);
  // A run that repeats the adapter's rank and alpha, resumed: the adapter it started from is part
  // of what it trains, so it stays. Without it the default selection would choose other matrices
  // (and drop some of the checkpoint's).
  TempDir other;
  std::vector<std::string> again = args;
  again.front() = "base_output_directory=" + other.str();
  again.insert(again.end(), {"lora_rank=4", "lora_alpha=" + std::to_string(a.shape.alpha)});
  {
    std::ostringstream log;
    Trainer(Config::defaults(again)).run(log);
  }
  std::vector<std::string> without;
  for (const std::string& k : again)
    if (!k.starts_with("lora_restore_path=")) without.push_back(k);
  without.push_back("steps=2");
  expect_error([&] { Trainer(Config::defaults(without)); },
               {"lora_restore_path", "resuming needs the same value"});
  // Another rank than the adapter's is refused.
  args.push_back("lora_rank=8");
  expect_error([&] { Trainer(Config::defaults(args)); },
               {"lora_rank=8", "rank 4", "lora_restore_path"});
}

TEST(LoraConfig, BadSettingsAreRefusedNamingTheKey) {
  TempDir dir;
  auto refused = [&](std::vector<std::string> keys, const std::vector<std::string>& parts) {
    std::vector<std::string> args = lora_run(dir, 1);
    for (const std::string& k : keys) {
      const std::string key = k.substr(0, k.find('='));
      std::erase_if(args, [&](const std::string& a) { return a.starts_with(key + "="); });
      args.push_back(k);
    }
    expect_error([&] { Trainer(Config::defaults(args)); }, parts);
    EXPECT_FALSE(fs::exists(dir / "t")) << "nothing written for " << keys[0];
  };
  refused({"lora_rank=0"}, {"lora_rank=0", "at least 1"});
  refused({"lora_rank=100"}, {"lora_rank=100", "exceeds", "lora_rank <="});
  refused({"lora_alpha=0"}, {"lora_alpha=0", "change nothing"});
  refused({"lora_module_path=decoder/layers_0/attention/qkv"},
          {"lora_module_path='decoder/layers_0/attention/qkv'", "matches no matrix",
           "decoder/layers_0/self_attention/"});
  refused({"lora_module_path=MoeBlock_0/wi_0"}, {"wi_0", "wi_1", "experts.gate_up_proj"});
  refused({"lora_target_modules=q_projj"}, {"lora_target_modules", "'q_projj'", "q_proj"});
  refused({"lora_target_modules=experts"}, {"lora_target_parameters", "experts.gate_up_proj"});
  refused({"lora_target_modules=q_proj", "lora_module_path=query"}, {"set one of them"});
  refused({"lora_target_parameters=experts.gate_up_proj", "lora_dropout=0.1"},
          {"lora_dropout", "PEFT"});
  refused({"lora_dropout=0.1"}, {"lora_dropout=0.1", "experts", "MaxText's gemma4 default"});
  refused({"enable_lora=false", "lora_weight_qtype=nf4"}, {"lora_weight_qtype=nf4", "enable_lora"});
  refused({"enable_lora=false", "lora_restore_path=" + kPeft + "/dense/lora"},
          {"lora_restore_path", "enable_lora=true"});
  refused({"freeze=norm"}, {"freeze", "enable_lora"});
  refused({"lora_tile_size=63", "lora_weight_qtype=nf4"}, {"lora_tile_size=63", "even"});
}

}  // namespace
}  // namespace gemmax

// Training end to end: the loss falls; metrics are written; bad input fails before any step.
#include "gemmax/train/trainer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fault_hooks.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/data/token_shard.h"
#include "gemmax/train/optimizer.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::TempDir;

// The tiny preset's structure (5 sliding + 1 global layer) at a width that trains in seconds.
std::vector<std::string> small_run(const TempDir& dir, int64_t steps) {
  return {"base_output_directory=" + dir.str(),
          "run_name=t",
          "base_emb_dim=64",
          "max_target_length=64",
          "per_device_batch_size=4",
          "learning_rate=1e-2",
          "steps=" + std::to_string(steps),
          "log_period=1000"};
}

std::vector<double> losses_of(const TempDir& dir) {
  std::ifstream in(dir / "t/metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);)
    losses.push_back(nlohmann::json::parse(line)["learning/loss"].get<double>());
  return losses;
}

using RunArgs = std::function<std::vector<std::string>(const TempDir&, int64_t)>;

// A run of `steps` steps split at a checkpoint after `split_at` ends with the uninterrupted run's
// losses and weights, bit for bit; the uninterrupted run's log holds `says`. `split` keeps the
// split run's folder for what the caller checks next.
void expect_split_run_is_whole(const RunArgs& args, int64_t steps, int64_t split_at,
                               const TempDir& split, const std::string& says) {
  TempDir whole;
  std::ostringstream log;
  Trainer a(Config::defaults(args(whole, steps)));
  a.run(log);
  EXPECT_NE(log.str().find(says), std::string::npos) << log.str();
  Trainer(Config::defaults(args(split, split_at))).run(log);  // ends (and lets go of its folder)
  Trainer resumed(Config::defaults(args(split, steps)));
  EXPECT_EQ(resumed.start_step(), split_at);
  resumed.run(log);
  EXPECT_EQ(losses_of(whole), losses_of(split));
  ASSERT_EQ(a.weights().nbytes(), resumed.weights().nbytes());
  EXPECT_EQ(0, std::memcmp(a.weights().raw(), resumed.weights().raw(), a.weights().nbytes()));
}

// Continuing `split`'s run to `steps` with `changes` made to its keys is refused, the error
// naming each of `says`.
void expect_resume_refused(const RunArgs& args, const TempDir& split, int64_t steps,
                           const std::vector<std::string>& changes,
                           const std::vector<std::string>& says) {
  std::vector<std::string> other = args(split, steps);
  other.insert(other.end(), changes.begin(), changes.end());
  std::ostringstream log;
  testing::expect_error([&] { Trainer(Config::defaults(other)).run(log); }, says);
}

TEST(Train, TinyModelLossFallsClearly) {
  TempDir dir;
  Trainer trainer(Config::defaults(small_run(dir, 60)));
  std::ostringstream log;
  const TrainSummary s = trainer.run(log);
  EXPECT_EQ(s.steps, 60);
  // MaxText's initialisation: the tied head's logits start with a standard deviation of about 1,
  // so the first loss is about ln V + 1/2 (docs/MODEL.md §4.9).
  EXPECT_NEAR(s.first_loss, std::log(259.0) + 0.5, 0.3) << "a fresh model predicts ~uniformly";
  // Average the last 10 losses from metrics.jsonl: they must sit well below the start.
  const std::vector<double> losses = losses_of(dir);
  ASSERT_EQ(losses.size(), 60u);
  double tail = 0;
  for (size_t i = 50; i < 60; ++i) tail += losses[i] / 10;
  EXPECT_LT(tail, s.first_loss - 2.0) << log.str();
  // The run's resolved config reads back to the same config.
  const Config again = Config::load(dir / "t/config.yml", {});
  EXPECT_EQ(again.to_json(), Config::defaults(small_run(dir, 60)).to_json());
}

// The small block (gemma4-e2b/e4b's, at the tiny width): it learns, a run split at a checkpoint
// ends with the uninterrupted run's weights bit for bit, and it closes with a sample.
TEST(Train, SmallBlockLearnsAndResumesBitForBit) {
  auto args = [](const TempDir& dir, int64_t steps) {
    std::vector<std::string> v = small_run(dir, steps);
    v.insert(v.end(), {"decoder_block=gemma4_small", "num_experts=1", "sliding_window_pattern=3",
                       "share_kv_projections=false", "global_num_kv_heads=2",
                       "hidden_size_per_layer_input=16", "vocab_size_per_layer_input=259",
                       "num_kv_shared_layers=2", "use_double_wide_mlp=true", "eval_interval=-1",
                       "learning_rate_schedule_steps=40"});
    return v;
  };
  TempDir dir;
  Trainer trainer(Config::defaults(args(dir, 40)));
  std::ostringstream log;
  const TrainSummary s = trainer.run(log);
  const std::vector<double> losses = losses_of(dir);
  ASSERT_EQ(losses.size(), 40u);
  double tail = 0;
  for (size_t i = 30; i < 40; ++i) tail += losses[i] / 10;
  EXPECT_LT(tail, s.first_loss - 1.0) << log.str();
  EXPECT_NE(log.str().find("gemmax: sample"), std::string::npos) << "the small block decodes";
  TempDir split;
  expect_split_run_is_whole(args, 4, 2, split, "gemmax: done");
}

// MaxText's grain pipeline (window shuffle, truncation, first-fit packing): a run split at a
// checkpoint reads the batches the uninterrupted run reads and ends with its weights bit for bit;
// resuming with another packing is refused.
TEST(Train, FirstFitPackingResumesBitForBit) {
  auto args = [](const TempDir& dir, int64_t steps) {
    std::vector<std::string> v = small_run(dir, steps);
    v.insert(v.end(), {"grain_packing_type=first_fit", "enable_data_shuffling=true",
                       "grain_shuffle_buffer_size=7", "use_truncation=true", "data_shuffle_seed=3",
                       "eval_interval=-1", "learning_rate_schedule_steps=4"});
    return v;
  };
  TempDir split;
  expect_split_run_is_whole(args, 4, 2, split, "packed first-fit after a shuffle in windows of 7");
  expect_resume_refused(args, split, 6,
                        {"grain_packing_type=sequential", "enable_data_shuffling=false"},
                        {"was written with", "but this run has", "resuming needs the same value"});
}

// MaxText's HF pipeline (dataset_type=hf: datasets' streaming shuffle, first fit): a run split at
// a checkpoint in its second epoch reads the batches the uninterrupted run reads, bit for bit;
// resuming with the other datasets version's shuffle is refused.
TEST(Train, HfOrderResumesBitForBit) {
  TempDir data;
  int64_t id = 0;
  for (const auto& [name, rows] :
       {std::pair{"train-00000-of-00002.jsonl", 40}, std::pair{"train-00001-of-00002.jsonl", 23}}) {
    std::ofstream out(data / name);
    for (int i = 0; i < rows; ++i, ++id)
      out << nlohmann::json{{"text", "row " + std::to_string(id)}}.dump() << "\n";
  }
  auto args = [&](const TempDir& dir, int64_t steps) {
    std::vector<std::string> v = small_run(dir, steps);
    v.insert(v.end(),
             {"dataset_type=hf", "hf_path=" + data.str(), "use_truncation=true",
              "data_shuffle_seed=5", "eval_interval=-1", "learning_rate_schedule_steps=6"});
    return v;
  };
  TempDir split;
  expect_split_run_is_whole(args, 6, 3, split, "MaxText's HF-pipeline order (datasets 5.x");
  expect_resume_refused(args, split, 8, {"hf_datasets_version=4"},
                        {"hf_datasets_version", "was written with", "but this run has"});
}

// A checkpoint written with tokenizer_type=byte (the default before auto) resumes under auto
// with no tokenizer_path: the same tokenizer. (Another kind needs a tokenizer_path, which must
// match on resume too.)
TEST(Train, ResumesAnExplicitByteTokenizerUnderAuto) {
  TempDir dir;
  std::ostringstream log;
  std::vector<std::string> first = small_run(dir, 1);
  first.push_back("tokenizer_type=byte");
  Trainer(Config::defaults(first)).run(log);
  Trainer resumed(Config::defaults(small_run(dir, 2)));
  EXPECT_EQ(resumed.start_step(), 1);
  resumed.run(log);
  EXPECT_EQ(losses_of(dir).size(), 2u);
}

class TrainThreads : public testing::WithThreads {};

// Remat changes what is kept, never a number: the runs agree bit for bit (bf16, the default).
TEST_P(TrainThreads, RematPoliciesReproduceTheRunBitForBit) {
  TempDir a, b, c;
  auto with = [](std::vector<std::string> v, const std::string& extra) {
    v.push_back(extra);
    return Config::defaults(v);
  };
  Trainer ta(with(small_run(a, 3), "remat_policy=none"));
  Trainer tb(with(small_run(b, 3), "remat_policy=minimal"));
  Trainer tc(Config::defaults(small_run(c, 3)));  // full
  std::ostringstream log;
  ta.run(log);
  tb.run(log);
  tc.run(log);
  EXPECT_EQ(losses_of(a), losses_of(b));
  EXPECT_EQ(losses_of(a), losses_of(c));
  EXPECT_EQ(0, std::memcmp(ta.weights().raw(), tb.weights().raw(), ta.weights().nbytes()));
  EXPECT_EQ(0, std::memcmp(ta.weights().raw(), tc.weights().raw(), ta.weights().nbytes()));
}

TEST_P(TrainThreads, VocabularyTilingGivesTheSameLosses) {
  TempDir a, b;
  std::vector<std::string> one = small_run(a, 3), other = small_run(b, 3);
  one.push_back("dtype=float32");
  other.push_back("dtype=float32");
  other.push_back("num_vocab_tiling=4");
  Trainer ta(Config::defaults(one)), tb(Config::defaults(other));
  std::ostringstream log;
  ta.run(log);
  tb.run(log);
  const auto la = losses_of(a), lb = losses_of(b);
  ASSERT_EQ(la.size(), 3u);
  // Step 0 sees the same weights: the tiles only regroup rows, so the loss agrees to the order of
  // an fp64 sum; later steps also differ by the order in which tiles add into the embedding
  // gradient (fp32 rounding).
  EXPECT_NEAR(la[0], lb[0], 1e-12 * la[0]);
  for (size_t i = 1; i < 3; ++i) EXPECT_NEAR(la[i], lb[i], 1e-6 * la[i]);
}

INSTANTIATE_TEST_SUITE_P(Train, TrainThreads, ::testing::Values(1, 2, 3), testing::threads_name);

// The same run twice gives the same bits: every reduction sums in a fixed order, whatever
// order the threads finish in (fp32 with a tiled head, and the bf16 default; both backends).
// With one thread this holds trivially, and with two a sum of two partials cannot depend on
// their order: three threads is the first count where an arrival-order reduction shows.
class RepeatThreads : public testing::WithThreads {};

TEST_P(RepeatThreads, RepeatedRunsAreBitIdentical) {
  for (const std::string backend : {"reference", "cpu"}) {
    for (const std::string dtype : {"float32", "bfloat16"}) {
      TempDir a, b;
      std::vector<std::string> args_a = small_run(a, 3), args_b = small_run(b, 3);
      for (auto* v : {&args_a, &args_b})
        v->insert(v->end(), {"backend=" + backend, "dtype=" + dtype, "num_vocab_tiling=4"});
      Trainer ta(Config::defaults(args_a)), tb(Config::defaults(args_b));
      std::ostringstream log;
      ta.run(log);
      tb.run(log);
      EXPECT_EQ(losses_of(a), losses_of(b)) << backend << " " << dtype;
      EXPECT_EQ(0, std::memcmp(ta.weights().raw(), tb.weights().raw(), ta.weights().nbytes()))
          << backend << " " << dtype;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Train, RepeatThreads, ::testing::Values(2, 3), testing::threads_name);

// ---- non-finite steps ------------------------------------------------------------------------

// small_run at half the width and length: these runs only need steps to happen.
std::vector<std::string> tiny_run(const TempDir& dir, int64_t steps, std::string extra) {
  std::vector<std::string> v = small_run(dir, steps);
  for (const char* k : {"base_emb_dim=32", "max_target_length=32"}) v.push_back(k);
  v.push_back(extra);
  return v;
}

Tensor checkpoint_params(const std::string& dir, const ParamTable& table, DType dtype) {
  const TrainCheckpoint c = open_train_checkpoint(dir);
  Tensor w = Tensor::empty({table.total()}, dtype);
  for (const ParamSpec& s : table.specs()) {
    const Tensor t = c.params.read_as(s.name, dtype);
    std::memcpy(table.view(w, s.name).raw(), t.raw(), t.nbytes());
  }
  return w;
}

// A NaN in one gradient while the loss is finite: the step is not applied, the run stops naming
// the step and the parameter, and the weights are still those of the last checkpoint.
TEST(NonFinite, GradientStopsTheRunNamingStepAndParameter) {
  TempDir dir;
  const std::string name = "layers.2.mlp.up_proj.weight";
  Trainer t(Config::defaults(tiny_run(dir, 5, "checkpoint_period=1")), nullptr,
            testing::nan_gradient(name, 3, 1));  // the third update: step 2
  std::ostringstream log;
  const std::string msg = testing::expect_error(
      [&] { t.run(log); },
      {"step 2:", "the first parameter with a non-finite gradient is " + name, "(element 0: nan)",
       "the update was not applied", "checkpoints/step_00000002", "skip_nonfinite_steps"});
  EXPECT_EQ(losses_of(dir).size(), 2u);
  const auto saved = list_train_checkpoints(dir / "t/checkpoints");
  ASSERT_FALSE(saved.empty());
  EXPECT_EQ(saved.back().step, 2);
  const Tensor w = checkpoint_params(saved.back().dir, t.model().params(), t.weights().dtype());
  EXPECT_EQ(0, std::memcmp(w.raw(), t.weights().raw(), w.nbytes())) << "the update was applied";
}

// skip_nonfinite_steps=N skips up to N such steps, counting them in metrics.jsonl; one more
// stops the run.
TEST(NonFinite, SkippedStepsAreCountedUpToTheLimit) {
  TempDir a, b;
  const std::string name = "layers.0.router.per_expert_scale";
  Trainer t(Config::defaults(tiny_run(a, 4, "skip_nonfinite_steps=2")), nullptr,
            testing::nan_gradient(name, 2, 2));  // steps 1 and 2
  std::ostringstream log;
  const TrainSummary s = t.run(log);
  EXPECT_EQ(s.steps, 4);
  EXPECT_EQ(s.skipped_steps, 2);
  EXPECT_NE(log.str().find("step 1: the gradient norm is nan"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("step skipped (2 of skip_nonfinite_steps=2)"), std::string::npos);
  std::vector<int64_t> skipped;
  std::ifstream in(a / "t/metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    skipped.push_back(nlohmann::json::parse(line).value("learning/skipped_steps", int64_t(0)));
  EXPECT_EQ(skipped, (std::vector<int64_t>{0, 1, 2, 2}));
  for (int64_t i = 0; i < t.weights().numel(); ++i)
    ASSERT_TRUE(std::isfinite(get_as_double(t.weights(), i))) << i;

  Trainer u(Config::defaults(tiny_run(b, 4, "skip_nonfinite_steps=1")), nullptr,
            testing::nan_gradient(name, 2, 2));
  testing::expect_error([&] { u.run(log); },
                        {"step 2:", name, "1 such steps skipped already, skip_nonfinite_steps=1"});
}

// The checkpoint writer refuses NaN or infinite weights and moments, before writing anything.
TEST(NonFinite, CheckpointWriterRefusesNonFiniteValues) {
  TempDir dir;
  const std::string ckpts = dir / "checkpoints";
  Tensor ok = Tensor::zeros({4}, DType::F32), bad = Tensor::zeros({4}, DType::F32);
  bad.data<float>()[3] = std::numeric_limits<float>::infinity();
  save_train_checkpoint(ckpts, 1, {{"w", ok}}, {{"mu.w", ok}}, {{"data", nlohmann::json::object()}},
                        0);
  testing::expect_error(
      [&] {
        save_train_checkpoint(ckpts, 2, {{"w", bad}}, {{"mu.w", ok}}, {}, 0);
      },
      {"refusing to save checkpoint step 2", "parameter 'w'", "inf", "element 3"});
  bad.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  testing::expect_error(
      [&] {
        save_train_checkpoint(ckpts, 2, {{"w", ok}}, {{"mu.w", bad}}, {}, 0);
      },
      {"optimizer state 'mu.w'", "nan"});
  EXPECT_EQ(testing::TempDir::list_of(ckpts), std::vector<std::string>{"step_00000001"});
}

TEST(Train, BadSettingsFailBeforeAnythingIsWritten) {
  TempDir dir;
  auto args = [&](std::string extra) {
    std::vector<std::string> v = small_run(dir, 1);
    v.push_back(extra);
    return Config::defaults(v);
  };
  testing::expect_error([&] { Trainer t(args("num_vocab_tiling=3")); },
                        {"num_vocab_tiling=3", "max_target_length=64"});
  testing::expect_error([&] { Trainer t(args("remat_policy=some")); }, {"remat_policy='some'"});
  testing::expect_error([&] { Trainer t(args("dtype=float16")); },
                        {"dtype=float16", "not supported"});
  testing::expect_error([&] { Trainer t(args("max_target_length=2000000")); },
                        {"max_target_length"});
  EXPECT_FALSE(std::filesystem::exists(dir / "t")) << "a failed setup left a run directory";
}

// A tokenizer with a larger vocabulary than the model's is not the model's, even where the
// data's ids happen to fit: a shard that records one, or a tokenizer_path, is refused before
// any step, naming the file, both sizes and the fix.
TEST(Train, ATokenizerWiderThanTheModelIsRefused) {
  TempDir dir;
  auto shard = [&](const char* name, int64_t vocab) {
    ShardWriter w(dir / name, vocab, 1, 2, 0);
    for (int d = 0; d < 40; ++d) {
      std::vector<int32_t> ids;  // below 259 whatever the tokenizer
      for (int i = 0; i < 30; ++i) ids.push_back(3 + (d * 7 + i * 13) % 250);
      w.add_document(ids, true);
    }
    w.finish();
    return dir / name;
  };
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = small_run(dir, 1);
    v.push_back("dataset_type=shards");
    v.insert(v.end(), extra.begin(), extra.end());
    return Config::defaults(v);
  };
  const std::string wide = shard("wide.bin", 700), fits = shard("fits.bin", 259);
  testing::expect_error(
      [&] { Trainer t(args({"dataset_path=" + wide})); },
      {"wide.bin", "vocabulary (700 ids) is larger than the model's (vocab_size 259)",
       "re-tokenize"});
  testing::expect_error(
      [&] {
        Trainer t(args({"dataset_path=" + fits, "eval_dataset_path=" + wide}));
      },
      {"wide.bin", "700"});
  const std::string tokenizer =
      std::string(GEMMAX_SOURCE_DIR) + "/tests/data/fixtures/tokenizer_json/gemma";
  testing::expect_error(
      [&] {
        Trainer t(args({"dataset_path=" + fits, "tokenizer_path=" + tokenizer}));
      },
      {"tokenizer_path", "tokenizer_json/gemma", "vocabulary of 700 ids", "vocab_size 259",
       "sample_max_new_tokens=0"});
  EXPECT_FALSE(std::filesystem::exists(dir / "t")) << "a failed setup left a run directory";
  Trainer ok(
      args({"dataset_path=" + fits, "tokenizer_path=" + tokenizer, "sample_max_new_tokens=0"}));
}

}  // namespace
}  // namespace gemmax

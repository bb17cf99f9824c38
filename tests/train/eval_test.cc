// Evaluation: an eval batch's loss is the training step's, bit for bit; evaluation changes nothing
// in a run (resumed or not); target_eval_loss stops a run with a checkpoint; the figures reach
// metrics.jsonl under MaxText's names; bad eval settings are named.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/data/token_shard.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/train/eval.h"
#include "gemmax/train/trainer.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_error;
using testing::TempDir;

// The eval batch through eval_batch and the same batch through a training step, from the same
// weights: the step's losses (read before its update applies) and the eval's are equal, bit for
// bit; the eval leaves the weights as they were.
TEST(Eval, BatchLossEqualsTheTrainingStepsForwardBitForBit) {
  const ModelConfig cfg = testing::small_test_config(2);
  for (const auto& [backend, act, wdt, remat] :
       {std::tuple{"cpu", DType::BF16, DType::F32, RematPolicy::Full},
        std::tuple{"cpu", DType::BF16, DType::F32, RematPolicy::None},
        std::tuple{"reference", DType::F64, DType::F64, RematPolicy::Minimal},
        std::tuple{"reference", DType::BF16, DType::F32, RematPolicy::Full}}) {
    auto be = make_backend(backend);
    ModelOptions mo;
    mo.act = act;
    mo.remat = remat;
    Gemma4Model model(cfg, *be, mo);
    const std::vector<bool> all(model.params().specs().size(), true);
    const AdamWConfig adam = AdamWConfig::from(train_config_from(Config::defaults({})).optimizer);
    const Tensor w = testing::random_weights(model.params(), 3, wdt);
    Batch batch = testing::make_batch(3, 12, cfg.vocab_size, 7, 5);
    for (size_t i = 0; i < batch.target_segment_ids.size(); i += 4)
      batch.target_segment_ids[i] = 0;  // a mask: some targets not counted
    TrainState train = make_train_state(*be, model.params(), all, wdt, adam);
    TrainState eval = make_train_state(*be, model.params(), all, wdt, adam);
    be->upload(train.weights, w);
    be->upload(eval.weights, w);
    be->fill({.x = eval.grads, .value = 0.5});  // evaluation writes no gradient
    const StepInputs in = upload_batch(*be, batch);
    train_step(*be, model, train, in, 1e-2, 1);
    const LossInfo step = read_step(*be, model, train, in).loss;
    const EvalBatchLoss e = eval_batch(*be, model, eval, batch);
    const std::string what = str_cat(backend, " ", dtype_name(act), " remat ", int(remat));
    EXPECT_EQ(e.loss.ce_loss, step.ce_loss) << what;
    EXPECT_EQ(e.loss.lb_loss, step.lb_loss) << what;
    EXPECT_EQ(e.loss.total_loss, step.total_loss) << what;
    EXPECT_EQ(e.loss.num_targets, step.num_targets) << what;
    EXPECT_EQ(e.loss.num_targets, batch.num_target_tokens()) << what;
    EXPECT_EQ(Gemma4Model::ce_mean(e.ce_sum, e.loss.num_targets), e.loss.ce_loss) << what;
    const Tensor after = be->to_host(eval.weights);
    EXPECT_EQ(0, std::memcmp(after.raw(), w.raw(), w.nbytes())) << what << ": weights changed";
    const Tensor grads = be->to_host(eval.grads);
    for (int64_t i = 0; i < grads.numel(); ++i)
      if (get_as_double(grads, i) != 0.5) {
        ADD_FAILURE() << what << ": gradient " << i << " written by evaluation";
        break;
      }
  }
}

// Evaluation alone (gemmax eval's state) allocates no gradient and no Adam moment, and keeps no
// layer's activations past the layer: its peak of activations is below a training step's that
// keeps them (remat None), and its loss is that step's.
TEST(Eval, ForwardOnlyAllocatesNoGradientsAndKeepsNoActivations) {
  const ModelConfig cfg = testing::small_test_config(3);
  ModelOptions mo;
  mo.act = DType::F32;
  mo.remat = RematPolicy::None;
  const Batch batch = testing::make_batch(2, 16, cfg.vocab_size, 9, 4);
  auto be = make_backend("cpu");
  MemoryTracker& mem = be->tracker();  // the process's: measured one phase at a time
  Gemma4Model model(cfg, *be, mo);
  const Tensor w = testing::random_weights(model.params(), 5, DType::F32);
  EvalBatchLoss e;
  size_t eval_activations = 0;
  {
    mem.reset_peaks();
    TrainState eval = make_eval_state(*be, model.params(), DType::F32);
    EXPECT_FALSE(eval.grads.defined());
    EXPECT_EQ(eval.optimizer, nullptr);
    upload_weights(*be, model.params(), eval, w);
    e = eval_batch(*be, model, eval, batch);
    EXPECT_EQ(mem.peak(MemKind::Grads), mem.current(MemKind::Grads));
    EXPECT_EQ(mem.peak(MemKind::OptState), mem.current(MemKind::OptState));
    eval_activations = mem.peak(MemKind::Activations) - mem.current(MemKind::Activations);
  }
  mem.reset_peaks();
  const size_t grads_before = mem.current(MemKind::Grads);
  const std::vector<bool> all(model.params().specs().size(), true);
  TrainState train =
      make_train_state(*be, model.params(), all, DType::F32,
                       AdamWConfig::from(train_config_from(Config::defaults({})).optimizer));
  upload_weights(*be, model.params(), train, w);
  const StepInputs in = upload_batch(*be, batch);
  train_step(*be, model, train, in, 1e-2, 1);
  EXPECT_EQ(e.loss.total_loss, read_step(*be, model, train, in).loss.total_loss);
  EXPECT_GT(mem.peak(MemKind::Grads), grads_before);
  const size_t train_activations =
      mem.peak(MemKind::Activations) - mem.current(MemKind::Activations);
  EXPECT_LT(eval_activations, train_activations / 2);
}

std::vector<std::string> run_args(const TempDir& dir, int64_t steps,
                                  std::vector<std::string> more = {}) {
  std::vector<std::string> v = {"base_output_directory=" + dir.str(), "run_name=t",
                                "base_emb_dim=32", "max_target_length=32",
                                "per_device_batch_size=2", "learning_rate=1e-2",
                                "steps=" + std::to_string(steps), "log_period=1000",
                                "sample_max_new_tokens=0", "checkpoint_period=2",
                                "learning_rate_schedule_steps=4"};
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

std::vector<nlohmann::json> metrics_of(const TempDir& dir) {
  std::ifstream in(dir / "t/metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Evaluating every 2 steps, in one invocation or resumed after step 2, trains exactly what a run
// without evaluation trains (losses and weights bit for bit), and both evaluating runs report the
// same eval figures at the same steps.
TEST(Eval, ChangesNothingInARunResumedOrNot) {
  TempDir plain, evaluated, resumed;
  const std::vector<std::string> eval = {"eval_interval=2", "eval_steps=3"};
  std::ostringstream log;
  Trainer(Config::defaults(run_args(plain, 4, {"eval_interval=-1"}))).run(log);
  Trainer te(Config::defaults(run_args(evaluated, 4, eval)));
  const TrainSummary s = te.run(log);
  EXPECT_EQ(s.evaluations, 2);
  Trainer(Config::defaults(run_args(resumed, 2, eval))).run(log);
  Trainer tr(Config::defaults(run_args(resumed, 4, eval)));
  ASSERT_EQ(tr.start_step(), 2);
  tr.run(log);

  const auto p = metrics_of(plain), e = metrics_of(evaluated), r = metrics_of(resumed);
  ASSERT_EQ(p.size(), 4u);
  ASSERT_EQ(e.size(), 4u);
  ASSERT_EQ(r.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(p[i]["learning/loss"], e[i]["learning/loss"]) << "step " << i;
    EXPECT_EQ(p[i]["learning/loss"], r[i]["learning/loss"]) << "step " << i;
    EXPECT_FALSE(p[i].contains("eval/avg_loss"));
    const bool due = (i + 1) % 2 == 0;
    ASSERT_EQ(e[i].contains("eval/avg_loss"), due) << "step " << i;
    if (!due) continue;
    for (const char* k : {"eval/avg_loss", "eval/avg_perplexity", "eval/total_loss",
                          "eval/total_weights", "eval/moe_lb_loss", "eval/avg_moe_lb_loss"})
      EXPECT_EQ(e[i][k], r[i][k]) << k << " at step " << i;
    const int64_t weights = e[i]["eval/total_weights"].get<int64_t>();
    EXPECT_GT(weights, 3 * 2 * 20) << "three packed batches of 2 x 32 tokens";
    EXPECT_LE(weights, 3 * 2 * 31) << "each row's last target is never counted";
    EXPECT_NEAR(e[i]["eval/avg_perplexity"].get<double>(),
                std::exp(e[i]["eval/avg_loss"].get<double>()), 1e-9);
  }
  EXPECT_LT(e[3]["eval/avg_loss"].get<double>(), e[1]["eval/avg_loss"].get<double>())
      << "the held-out loss falls as the model trains";
  const Tensor wp = load_model_dir(plain / "t", DType::F32).weights;
  const Tensor we = load_model_dir(evaluated / "t", DType::F32).weights;
  const Tensor wr = load_model_dir(resumed / "t", DType::F32).weights;
  EXPECT_EQ(0, std::memcmp(wp.raw(), we.raw(), wp.nbytes()));
  EXPECT_EQ(0, std::memcmp(wp.raw(), wr.raw(), wp.nbytes()));
  EXPECT_NE(log.str().find("eval_loss"), std::string::npos) << "the step line shows it";
  EXPECT_NE(log.str().find("held-out loss"), std::string::npos) << "the summary shows it";
}

// The held-out part of the built-in corpus is not training data: its first batch differs from
// the training stream's, and one pass over it ends.
TEST(Eval, TheBuiltinCorpusHoldsOutItsOwnDocuments) {
  DataOptions o;
  o.batch = 2;
  o.seq = 64;
  o.vocab_size = 259;
  auto train = make_data_loader(o);
  o.eval = true;
  auto held_out = make_data_loader(o);
  EXPECT_NE(train->next().inputs, held_out->next().inputs);
  int64_t batches = 1;
  while (!held_out->exhausted()) held_out->next(), ++batches;
  EXPECT_GT(batches, 100) << "32 KiB in 128-token batches";
  EXPECT_LT(batches, 300);
  EXPECT_NE(held_out->describe().find("held-out"), std::string::npos);
}

TEST(Eval, TargetEvalLossStopsTheRunWithACheckpoint) {
  TempDir dir;
  std::ostringstream log;
  Trainer t(Config::defaults(
      run_args(dir, 6, {"eval_interval=1", "eval_steps=1", "target_eval_loss=100"})));
  const TrainSummary s = t.run(log);
  EXPECT_TRUE(s.reached_target_eval_loss);
  EXPECT_EQ(s.final_step, 1);
  EXPECT_TRUE(std::filesystem::exists(dir / "t/checkpoints/step_00000001")) << log.str();
  EXPECT_NE(log.str().find("target_eval_loss"), std::string::npos) << log.str();
}

// `gemmax eval` on the run's checkpoint, and on its export as an fp32 HF folder, reproduces the
// run's last evaluation bit for bit (the same weights, eval batches and code).
TEST(Eval, TheEvalCommandReproducesTheRunsLastEvaluation) {
  TempDir dir;
  const std::vector<std::string> eval = {"eval_interval=2", "eval_steps=2"};
  std::ostringstream log;
  Trainer(Config::defaults(run_args(dir, 2, eval))).run(log);
  const auto m = metrics_of(dir);
  ASSERT_EQ(m.size(), 2u);
  ASSERT_TRUE(m[1].contains("eval/avg_loss"));
  std::string out;
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " export --checkpoint " + dir / "t" +
                                     " --out " + dir / "hf" + " --dtype float32",
                                 &out),
            0)
      << out;
  for (const std::string& model : {"checkpoint=" + dir / "t", "hf_dir=" + dir / "hf"}) {
    std::string cmd = std::string(GEMMAX_BINARY) + " eval " + model;
    for (const std::string& a : run_args(dir, 2, eval))
      if (!a.starts_with("base_output_directory")) cmd += " " + a;
    out.clear();
    ASSERT_EQ(testing::run_command(cmd, &out), 0) << cmd << "\n" << out;
    const nlohmann::json j = nlohmann::json::parse(out.substr(out.rfind('{')));
    for (const char* k : {"eval/avg_loss", "eval/total_loss", "eval/total_weights",
                          "eval/moe_lb_loss", "eval/avg_moe_lb_loss"})
      EXPECT_EQ(j[k], m[1][k]) << model << ": " << k;
    EXPECT_EQ(j["eval/batches"], 2);
  }
  expect_error(
      [&] {
        std::string o;
        if (testing::run_command(std::string(GEMMAX_BINARY) + " eval steps=3 2>&1", &o) != 0)
          fail(o);
      },
      {"no model given", "checkpoint=", "hf_dir="});
}

// `mpirun -np 2 gemmax eval` (FSDP shards, one eval row per rank) reports what one rank reports
// with both rows (fp64, to rounding), and what the run's own last evaluation reported.
TEST(Eval, TheEvalCommandOnTwoRanksEqualsOneRank) {
  if (std::string(GEMMAX_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  TempDir dir;
  const std::vector<std::string> keys = {"backend=reference", "dtype=float64",
                                         "weight_dtype=float64", "eval_interval=2",
                                         "eval_steps=3", "comm_timeout_seconds=120"};
  std::ostringstream log;
  Trainer(Config::defaults(run_args(dir, 2, keys))).run(log);
  const auto m = metrics_of(dir);
  ASSERT_EQ(m.size(), 2u);
  auto eval = [&](int ranks) {
    std::string cmd = ranks > 1 ? testing::mpiexec() + " -np " +
                                      std::to_string(ranks) + " " + GEMMAX_BINARY + " eval"
                                : std::string(GEMMAX_BINARY) + " eval";
    cmd += " checkpoint=" + dir / "t";
    for (const std::string& a : run_args(dir, 2, keys))
      if (!a.starts_with("base_output_directory") && !a.starts_with("per_device_batch_size"))
        cmd += " " + a;
    cmd += " per_device_batch_size=" + std::to_string(2 / ranks);
    std::string out;
    EXPECT_EQ(testing::run_command(cmd, &out), 0) << cmd << "\n" << out;
    const size_t brace = out.rfind('{');
    EXPECT_NE(brace, std::string::npos) << out;
    return brace == std::string::npos ? nlohmann::json() : nlohmann::json::parse(out.substr(brace));
  };
  const nlohmann::json one = eval(1), two = eval(2);
  ASSERT_TRUE(one.contains("eval/avg_loss") && two.contains("eval/avg_loss"));
  EXPECT_EQ(one["eval/batches"], 3);
  EXPECT_EQ(two["eval/batches"], 3);
  EXPECT_EQ(two["eval/total_weights"], one["eval/total_weights"]);
  EXPECT_EQ(one["eval/total_weights"], m[1]["eval/total_weights"]);
  for (const char* k : {"eval/avg_loss", "eval/total_loss", "eval/moe_lb_loss"}) {
    const double a = one[k].get<double>(), b = two[k].get<double>();
    EXPECT_NEAR(a, b, 1e-10 * std::abs(a)) << k;
    EXPECT_EQ(a, m[1][k].get<double>()) << k;
  }
}

TEST(Eval, BadSettingsAreNamed) {
  TempDir dir;
  auto make = [&](std::vector<std::string> more) {
    return [&dir, more] { Trainer t(Config::defaults(run_args(dir, 2, more))); };
  };
  expect_error(make({"eval_per_device_batch_size=3"}),
               {"eval_per_device_batch_size=3", "per_device_batch_size=2"});
  expect_error(make({"eval_interval=0"}), {"eval_interval", "-1"});
  expect_error(make({"vocab_tiling_axis=batch", "num_vocab_tiling=2",
                     "eval_per_device_batch_size=1"}),
               {"eval_per_device_batch_size=1", "num_vocab_tiling=2", "does not divide"});
  expect_error(make({"eval_steps=0"}), {"eval_steps"});
  expect_error(make({"target_eval_loss=-1"}), {"target_eval_loss"});
  // An eval set smaller than one batch (2 rows x 32 tokens).
  const std::string small = dir / "small.bin";
  {
    ShardWriter w(small, 259, 1, 2, 0);
    const std::vector<int32_t> ids(40, 100);
    w.add_document(ids, true);
    w.finish();
  }
  expect_error(make({"eval_dataset_path=" + small}),
               {"eval set", small, "42 tokens", "fewer than one eval batch", "64"});
  expect_error(make({"eval_dataset_path=" + dir / "missing.bin"}),
               {"eval_dataset_path", "missing.bin", "does not exist"});
  EXPECT_FALSE(std::filesystem::exists(dir / "t")) << "nothing written before the error";
}

}  // namespace
}  // namespace gemmax

// embedding_table=maxtext: AdamW trains the embedding as MaxText stores it, sqrt(D) times Hugging
// Face's table (docs/TRAINING.md §12). Checked against AdamW written out in fp64 on MaxText's own
// table: the clipping norm, the moments and the weights after two steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/config/train_config.h"
#include "gemmax/train/step.h"
#include "gemmax/train/trainer.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_error;
using testing::TempDir;

// AdamW as optax computes it on parameters θ (MaxText's units), after clipping by global norm.
struct PlainAdamW {
  AdamWConfig c;
  std::vector<double> m, v;
  double step(std::vector<double>& theta, const std::vector<double>& g, double lr, int64_t t) {
    m.resize(theta.size());
    v.resize(theta.size());
    double sq = 0;
    for (double x : g) sq += x * x;
    const double norm = std::sqrt(sq), clip = clip_factor(c.clip_norm, norm);
    for (size_t i = 0; i < theta.size(); ++i) {
      const double gi = g[i] * clip;
      m[i] = c.b1 * m[i] + (1 - c.b1) * gi;
      v[i] = c.b2 * v[i] + (1 - c.b2) * gi * gi;
      const double mh = m[i] / (1 - std::pow(c.b1, double(t)));
      const double vh = v[i] / (1 - std::pow(c.b2, double(t)));
      theta[i] -= lr * (mh / (std::sqrt(vh + c.eps_root) + c.eps) + c.weight_decay * theta[i]);
    }
    return norm;
  }
};

// Two steps of gemmax's AdamW on HF's table against PlainAdamW on the optimizer's table
// (`units` times the stored embedding, its gradient divided by `units`), in fp64.
void check_against_plain(bool maxtext_table) {
  const ParamTable table(testing::small_test_config(2));
  const double D = double(table.config().d_model);
  AdamWConfig cfg;
  cfg.eps = 1e-3;  // large enough that eps's units matter
  cfg.maxtext_embedding_table = maxtext_table;
  auto be = make_backend("reference");
  const std::vector<bool> all(table.specs().size(), true);
  TrainState s = make_train_state(*be, table, all, DType::F64, cfg);
  const Tensor w0 = testing::random_weights(table, 5);
  be->upload(s.weights, w0);

  // units per element: sqrt(D) on the embedding under the switch.
  std::vector<double> units(size_t(table.total()), 1.0), theta(units.size());
  bool has_embedding = false;
  for (const ParamSpec& p : table.specs())
    if (p.name == "embed_tokens.weight" && maxtext_table) {
      has_embedding = true;
      for (int64_t i = 0; i < p.numel(); ++i) units[size_t(p.offset + i)] = std::sqrt(D);
    }
  EXPECT_EQ(has_embedding, maxtext_table);
  for (size_t i = 0; i < theta.size(); ++i) theta[i] = units[i] * get_as_double(w0, int64_t(i));

  PlainAdamW plain{cfg, {}, {}};
  for (int64_t t = 1; t <= 2; ++t) {
    const Tensor g = testing::random_weights(table, 10 + uint64_t(t));
    std::vector<double> g_units(units.size());
    for (size_t i = 0; i < g_units.size(); ++i)
      g_units[i] = get_as_double(g, int64_t(i)) / units[i];
    const double lr = 3e-3 * double(t);
    const double norm = plain.step(theta, g_units, lr, t);
    ASSERT_GT(norm, cfg.clip_norm);  // clipping active: the norm's units matter
    be->upload(s.grads, g);
    be->fill({.x = s.scalars, .value = 0.0});
    s.optimizer->step(s.weights, s.grads, s.scalars, lr, t);
    const Tensor scalars = be->to_host(s.scalars);
    EXPECT_NEAR(std::sqrt(get_as_double(scalars, StepScalars::kGradSumSq)), norm, 1e-12 * norm);
  }
  const Tensor w = be->to_host(s.weights);
  double worst = 0;
  for (size_t i = 0; i < theta.size(); ++i)
    worst = std::max(worst, std::abs(get_as_double(w, int64_t(i)) * units[i] - theta[i]) /
                                (std::abs(theta[i]) + 1e-3));
  EXPECT_LT(worst, 1e-12) << (maxtext_table ? "embedding_table=maxtext" : "embedding_table=hf");
}

TEST(EmbeddingTable, MaxTextTableIsAdamWOnMaxTextsUnits) { check_against_plain(true); }

TEST(EmbeddingTable, HfTableIsPlainAdamW) { check_against_plain(false); }

// The two tables give different runs: the switch is not a no-op.
TEST(EmbeddingTable, SwitchChangesTheEmbeddingsStepOnly) {
  const ParamTable table(testing::small_test_config(2));
  auto be = make_backend("reference");
  const std::vector<bool> all(table.specs().size(), true);
  std::vector<Tensor> after;
  for (bool maxtext : {false, true}) {
    AdamWConfig cfg;
    cfg.clip_norm = 0;  // no clipping: only the embedding's own step may differ
    cfg.maxtext_embedding_table = maxtext;
    TrainState s = make_train_state(*be, table, all, DType::F64, cfg);
    be->upload(s.weights, testing::random_weights(table, 5));
    be->upload(s.grads, testing::random_weights(table, 6));
    s.optimizer->step(s.weights, s.grads, s.scalars, 1e-2, 1);
    after.push_back(be->to_host(s.weights));
  }
  for (const ParamSpec& p : table.specs()) {
    double diff = 0;
    for (int64_t i = 0; i < p.numel(); ++i)
      diff = std::max(diff, std::abs(get_as_double(after[0], p.offset + i) -
                                     get_as_double(after[1], p.offset + i)));
    if (p.name == "embed_tokens.weight")
      EXPECT_GT(diff, 1e-3) << p.name;
    else
      EXPECT_EQ(diff, 0.0) << p.name;
  }
}

// A run split at a checkpoint ends with the uninterrupted run's weights bit for bit (the moments
// are in MaxText's units); resuming with the other table is refused.
TEST(EmbeddingTable, ResumesBitForBitAndRefusesAnotherTable) {
  auto args = [](const TempDir& dir, int64_t steps, const char* table) {
    return Config::defaults(
        {"base_output_directory=" + dir.str(), "run_name=t", "base_emb_dim=64",
         "max_target_length=64", "per_device_batch_size=4", "learning_rate=1e-2",
         "steps=" + std::to_string(steps), "log_period=1000", "eval_interval=-1",
         "learning_rate_schedule_steps=4", std::string("embedding_table=") + table});
  };
  TempDir whole, split;
  std::ostringstream log;
  Trainer a(args(whole, 4, "maxtext"));
  a.run(log);
  Trainer(args(split, 2, "maxtext")).run(log);
  {
    Trainer resumed(args(split, 4, "maxtext"));
    EXPECT_EQ(resumed.start_step(), 2);
    resumed.run(log);
    ASSERT_EQ(a.weights().nbytes(), resumed.weights().nbytes());
    EXPECT_EQ(0, std::memcmp(a.weights().raw(), resumed.weights().raw(), a.weights().nbytes()));
  }
  expect_error(
      [&] { Trainer(args(split, 6, "hf")).run(log); },
      {"embedding_table=\"maxtext\"", "but this run has", "resuming needs the same value"});
}

// A checkpoint written before the key existed ran with HF's table (the default then), whatever
// the default is now: its moments are in HF's units.
TEST(EmbeddingTable, CheckpointsFromBeforeTheKeyResumeWithHfsTableOnly) {
  TempDir dir;
  auto args = [&](int64_t steps, std::vector<std::string> more = {}) {
    std::vector<std::string> a = {"base_output_directory=" + dir.str(), "run_name=t",
                                  "base_emb_dim=64", "max_target_length=64",
                                  "per_device_batch_size=4", "steps=" + std::to_string(steps),
                                  "log_period=1000", "eval_interval=-1"};
    a.insert(a.end(), more.begin(), more.end());
    return Config::defaults(a);
  };
  std::ostringstream log;
  Trainer(args(2, {"embedding_table=hf"})).run(log);
  const std::string state_path = list_train_checkpoints(dir / "t/checkpoints").back().dir + "/state.json";
  nlohmann::json state = nlohmann::json::parse(testing::read_file(state_path));
  ASSERT_EQ(state["config"].erase("embedding_table"), 1u);
  testing::write_file(state_path, state.dump());
  expect_error([&] { Trainer t(args(4)); },
               {"embedding_table=\"hf\"", "but this run has", "\"maxtext\""});
  EXPECT_EQ(Trainer(args(4, {"embedding_table=hf"})).start_step(), 2);
}

TEST(EmbeddingTable, KeyDefaultsToMaxTextAndNamesBadValues) {
  EXPECT_EQ(train_config_from(Config::defaults({})).optimizer.embedding_table, EmbeddingTable::MaxText);
  EXPECT_EQ(train_config_from(Config::defaults({"embedding_table=hf"})).optimizer.embedding_table,
            EmbeddingTable::Hf);
  expect_error([] { train_config_from(Config::defaults({"embedding_table=scaled"})); },
               {"embedding_table", "hf", "maxtext", "'scaled'"});
}

}  // namespace
}  // namespace gemmax

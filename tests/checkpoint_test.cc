// Runs that survive: checkpoints, exact resume, graceful stop, faults, fine-tuning, freezing,
// export.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "gemmax/io/atomic_file.h"
#include "gemmax/io/hf_checkpoint.h"
#include "gemmax/io/hf_config.h"
#include "gemmax/io/hf_model.h"
#include "gemmax/io/train_checkpoint.h"
#include "gemmax/train/trainer.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

// A small run: the tiny structure at width 32, 4 x 32 tokens per step. The schedule length is
// fixed, so runs of different `steps` follow the same learning rates.
std::vector<std::string> run_args(const TempDir& dir, int64_t steps,
                                  std::vector<std::string> extra = {}) {
  std::vector<std::string> v = {"base_output_directory=" + dir.str(), "run_name=r",
                                "base_emb_dim=32", "max_target_length=32",
                                "per_device_batch_size=4", "learning_rate=1e-2",
                                "learning_rate_schedule_steps=8", "log_period=1000",
                                "steps=" + std::to_string(steps)};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

TrainSummary train(const std::vector<std::string>& args) {
  Trainer t(Config::defaults(args));
  std::ostringstream log;
  return t.run(log);
}

Tensor final_weights(const std::vector<std::string>& args) {
  Trainer t(Config::defaults(args));
  std::ostringstream log;
  t.run(log);
  return t.weights();
}

// metrics.jsonl without the timing fields: what must match between two runs.
std::vector<std::string> loss_lines(const TempDir& dir) {
  std::vector<std::string> out;
  std::ifstream in(dir / "r/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    for (auto it = j.begin(); it != j.end();)
      it = it.key().rfind("perf/", 0) == 0 ? j.erase(it) : std::next(it);
    out.push_back(j.dump());
  }
  return out;
}

TEST(Checkpoint, ResumedRunEqualsUninterruptedBitForBit) {
  TempDir whole, split;
  const Tensor a = final_weights(run_args(whole, 6));
  const TrainSummary first = train(run_args(split, 3));
  EXPECT_EQ(first.final_step, 3);
  ASSERT_FALSE(first.last_checkpoint.empty());
  Trainer resumed(Config::defaults(run_args(split, 6)));
  EXPECT_EQ(resumed.start_step(), 3);
  std::ostringstream log;
  resumed.run(log);
  EXPECT_NE(log.str().find("resumed from"), std::string::npos) << log.str();
  EXPECT_EQ(0, std::memcmp(a.raw(), resumed.weights().raw(), a.nbytes()));
  const auto la = loss_lines(whole), lb = loss_lines(split);
  ASSERT_EQ(la.size(), 6u);
  EXPECT_EQ(la, lb);
}

TEST(Checkpoint, PeriodicSavesKeepTheNewest) {
  TempDir dir;
  train(run_args(dir, 5, {"checkpoint_period=1", "max_num_checkpoints_to_keep=2"}));
  const auto all = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].step, 4);
  EXPECT_EQ(all[1].step, 5);
  for (const auto& e : fs::directory_iterator(dir / "r/checkpoints"))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  // A finished run re-run with the same steps has nothing left to do.
  const TrainSummary again = train(run_args(dir, 5));
  EXPECT_EQ(again.steps, 0);
  EXPECT_EQ(again.final_step, 5);
}

TEST(Checkpoint, CorruptedOrTruncatedCheckpointIsAClearError) {
  TempDir dir;
  train(run_args(dir, 2));
  const std::string ckpt = list_train_checkpoints(dir / "r/checkpoints").back().dir;
  const std::string params = ckpt + "/params.safetensors";
  std::string bytes = testing::read_file(params);
  bytes[bytes.size() / 2] ^= 0x5a;
  testing::write_file(params, bytes);
  expect_error([&] { Trainer t(Config::defaults(run_args(dir, 4))); }, {params.substr(params.rfind('/') + 1), "CRC-32", "corrupted"});
  testing::write_file(params, bytes.substr(0, bytes.size() - 100));
  expect_error([&] { Trainer t(Config::defaults(run_args(dir, 4))); }, {"truncated"});
  fs::remove(ckpt + "/state.json");  // no state.json: not a checkpoint; a fresh start
  EXPECT_EQ(Trainer(Config::defaults(run_args(dir, 4))).start_step(), 0);
}

// Every key of state.json is checked before use: a missing or mistyped one is an error that
// names the file and the key, through the trainer as through the opener.
TEST(Checkpoint, StateJsonKeysAreValidatedAndNamed) {
  TempDir dir;
  train(run_args(dir, 2));
  const std::string ckpt = list_train_checkpoints(dir / "r/checkpoints").back().dir;
  const std::string state_path = ckpt + "/state.json";
  const nlohmann::json good = nlohmann::json::parse(testing::read_file(state_path));
  struct Case {
    std::string pointer;   // the key, as a JSON pointer
    nlohmann::json value;  // its replacement; null: remove the key
    std::string named;     // how the message names it
  };
  const std::vector<Case> cases = {
      {"/config", nullptr, "'config'"},
      {"/data", nullptr, "'data'"},
      {"/config", "gemma4-tiny", "'config' must be an object"},
      {"/data", nlohmann::json::array(), "'data' must be an object"},
      {"/step", nullptr, "'step'"},
      {"/step", -1, "'step' must be a non-negative integer"},
      {"/step", 7, "says step 7"},
      {"/version", nullptr, "'version'"},
      {"/format", nullptr, "'format'"},
      {"/format", 1, "'format' must be a string"},
      {"/files", nullptr, "'files'"},
      {"/files/params.safetensors", nullptr, "'files.params.safetensors'"},
      {"/files/optimizer.safetensors/bytes", nullptr, "'files.optimizer.safetensors.bytes'"},
      {"/files/params.safetensors/crc32", "x", "'files.params.safetensors.crc32' must be"},
  };
  for (const Case& c : cases) {
    nlohmann::json bad = good;
    const nlohmann::json::json_pointer p(c.pointer);
    if (c.value.is_null())
      bad[p.parent_pointer()].erase(p.back());
    else
      bad[p] = c.value;
    testing::write_file(state_path, bad.dump());
    SCOPED_TRACE(c.pointer);
    testing::expect_error([&] { open_train_checkpoint(ckpt); }, {state_path, c.named});
    testing::expect_error([&] { Trainer t(Config::defaults(run_args(dir, 4))); },
                          {state_path, c.named});
  }
  testing::write_file(state_path, "[1, 2]");
  testing::expect_error([&] { open_train_checkpoint(ckpt); }, {state_path, "not a JSON object"});
  testing::write_file(state_path, good.dump());
  EXPECT_EQ(Trainer(Config::defaults(run_args(dir, 4))).start_step(), 2);
}

TEST(Checkpoint, ResumingWithAnotherConfigIsRefused) {
  TempDir dir;
  train(run_args(dir, 2));
  expect_error([&] { Trainer t(Config::defaults(run_args(dir, 4, {"num_experts=4"}))); },
               {"different model", "num_experts: 8 vs 4"});
  expect_error([&] { Trainer t(Config::defaults(run_args(dir, 4, {"per_device_batch_size=2"}))); },
               {"per_device_batch_size=4", "per_device_batch_size=2"});
  // Keys that do not change the run's meaning may change.
  EXPECT_EQ(Trainer(Config::defaults(run_args(dir, 4, {"log_period=2"}))).start_step(), 2);
}

TEST(Checkpoint, FailedSaveKeepsThePreviousCheckpoint) {
  TempDir dir;
  const std::vector<std::string> args = run_args(dir, 4, {"checkpoint_period=2"});
  Trainer t(Config::defaults(args));
  std::ostringstream log;
  // The save at step 2 succeeds; make the one at step 4 fail part-way, as on a full disk.
  struct Disarm {
    ~Disarm() { inject_write_failure_after_bytes_for_testing(-1); }
  } disarm;
  const int64_t one_checkpoint = [&] {
    TempDir probe;
    train(run_args(probe, 1));
    uint64_t bytes = 0;
    for (const auto& e : fs::recursive_directory_iterator(probe / "r/checkpoints"))
      if (e.is_regular_file()) bytes += e.file_size();
    return int64_t(bytes);
  }();
  inject_write_failure_after_bytes_for_testing(one_checkpoint + one_checkpoint / 2);
  expect_error([&] { t.run(log); }, {"No space left on device"});
  const auto all = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].step, 2);
  EXPECT_NO_THROW(open_train_checkpoint(all[0].dir));
  for (const auto& e : fs::directory_iterator(dir / "r/checkpoints"))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
  // And the run resumes from it.
  EXPECT_EQ(Trainer(Config::defaults(args)).start_step(), 2);
}

// SIGTERM to a real `gemmax train`: it finishes the step, saves, exits 0, and resumes to the
// same result as an uninterrupted run.
TEST(Checkpoint, SigtermStopsGracefullyAndTheRunResumesExactly) {
  TempDir dir, whole;
  std::vector<std::string> args = run_args(dir, 8, {"log_period=1"});
  const std::string log_path = dir / "log.txt";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FILE* f = std::freopen(log_path.c_str(), "w", stdout);
    (void)f;
    std::vector<char*> argv = {const_cast<char*>(GEMMAX_BINARY), const_cast<char*>("train")};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(GEMMAX_BINARY, argv.data());
    ::_exit(127);
  }
  // Wait for the second step's line, then ask it to stop.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (testing::read_file(log_path).find("step     1 ") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string out = testing::read_file(log_path);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("stopped by SIGTERM"), std::string::npos) << out;
  const auto saved = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_EQ(saved.size(), 1u) << out;
  EXPECT_LT(saved[0].step, 8);
  EXPECT_NE(out.find(saved[0].dir), std::string::npos) << "the stop line names the checkpoint";

  args.back() = "log_period=1000";
  Trainer resumed(Config::defaults(args));
  std::ostringstream log;
  resumed.run(log);
  const Tensor a = final_weights(run_args(whole, 8));
  EXPECT_EQ(0, std::memcmp(a.raw(), resumed.weights().raw(), a.nbytes()));
  EXPECT_EQ(loss_lines(whole), loss_lines(dir));
}

// A folder with the names, prefix, dtype and sharding of the released 26B-A4B checkpoint
// (multimodal config, model.language_model., bf16 shards, vision tensors) at tiny size.
void write_released_layout(const ModelConfig& cfg, const Tensor& weights, const std::string& dir) {
  const ParamTable table(cfg);
  NamedTensors t = hf_named_tensors(table, weights, "model.language_model.", DType::BF16);
  t.emplace_back("model.vision_tower.encoder.layers.0.self_attn.q_proj.weight",
                 Tensor::zeros({8, 8}, DType::BF16));
  t.emplace_back("model.embed_vision.embedding_projection.weight", Tensor::zeros({8, 8}, DType::BF16));
  write_hf_checkpoint(dir, t, 64 * 1024);
  nlohmann::json text = nlohmann::json::parse(hf_config_json(cfg, DType::BF16));
  nlohmann::json top = {{"model_type", "gemma4"},
                        {"architectures", {"Gemma4ForConditionalGeneration"}},
                        {"dtype", "bfloat16"},
                        {"text_config", text}};
  testing::write_file(dir + "/config.json", top.dump(2));
}

TEST(FineTune, LoadsTheReleasedLayoutAndTrains) {
  TempDir dir;
  const std::vector<std::string> args = run_args(dir, 2, {"load_parameters_path=" + dir.file("hf")});
  const Config config = Config::defaults(args);
  Trainer probe(Config::defaults(run_args(dir, 0, {"run_name=probe"})));
  const ParamTable& table = probe.model().params();
  Tensor src = Tensor::empty({table.total()}, DType::F32);
  init_params(table, src, 99);
  write_released_layout(table.config(), src, dir.file("hf"));
  ASSERT_TRUE(HfCheckpoint::open(dir.file("hf")).sharded());

  Trainer t(config);
  for (int64_t i = 0; i < table.total(); i += 101)
    ASSERT_EQ(get_as_double(t.weights(), i), double(float(bf16(float(get_as_double(src, i))))));
  std::ostringstream log;
  const TrainSummary s = t.run(log);
  EXPECT_NE(log.str().find("initialised from"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("skipped 2 tensors outside the text decoder"), std::string::npos);
  EXPECT_EQ(s.steps, 2);
  // A folder of another shape is refused, naming the key.
  expect_error([&] { Trainer x(Config::defaults(run_args(dir, 2, {"run_name=other", "base_emb_dim=48",
                                                                 "load_parameters_path=" + dir.file("hf")}))); },
               {"base_emb_dim: 32 vs 48"});
}

TEST(Freeze, FrozenParametersStayFixedAndHaveNoOptimizerState) {
  TempDir dir;
  Trainer t(Config::defaults(run_args(dir, 2, {"freeze=self_attn|router"})));
  const ParamTable& table = t.model().params();
  Tensor before = Tensor::empty(t.weights().shape(), DType::F32);
  std::memcpy(before.raw(), t.weights().raw(), before.nbytes());
  std::ostringstream log;
  const TrainSummary s = t.run(log);
  EXPECT_NE(log.str().find("trained (freeze='self_attn|router')"), std::string::npos) << log.str();
  const TrainCheckpoint ckpt = open_train_checkpoint(s.last_checkpoint);
  for (const ParamSpec& p : table.specs()) {
    const bool frozen = p.name.find("self_attn") != std::string::npos ||
                        p.name.find("router") != std::string::npos;
    const bool same = std::memcmp(table.view(before, p.name).raw(), table.view(t.weights(), p.name).raw(),
                                  size_t(p.numel()) * 4) == 0;
    EXPECT_EQ(same, frozen) << p.name;
    EXPECT_EQ(ckpt.optimizer.has("mu." + p.name), !frozen) << p.name;
  }
  // The plan counts moments of the trained parameters only, as allocated.
  EXPECT_EQ(t.memory_plan().peak[size_t(MemKind::OptState)],
            int64_t(MemoryTracker::global().current(MemKind::OptState)));
  expect_error([&] { Trainer x(Config::defaults(run_args(dir, 2, {"run_name=f2", "freeze=attn("}))); },
               {"not a valid regular expression"});
  expect_error([&] { Trainer x(Config::defaults(run_args(dir, 2, {"run_name=f3", "freeze=nothing_like_this"}))); },
               {"matches no parameter"});
}

TEST(Export, CheckpointToHuggingFaceFolderAndBack) {
  TempDir dir;
  const TrainSummary s = train(run_args(dir, 2));
  std::string out;
  for (const char* dtype : {"float32", "bfloat16"}) {
    const std::string hf = dir / (std::string("hf_") + dtype);
    ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " export --checkpoint " +
                                       dir.file("r") + " --out " + hf + " --dtype " + dtype, &out), 0)
        << out;
    const HfModelFolder f = read_hf_model_folder(hf);
    EXPECT_EQ(f.info.weight_prefix, "model.");
    const ParamTable table(f.config);
    Tensor w = Tensor::zeros({table.total()}, DType::F32);
    load_hf_weights(table, f, w);
    const TrainCheckpoint ckpt = open_train_checkpoint(s.last_checkpoint);
    for (const ParamSpec& p : table.specs()) {
      const Tensor saved = ckpt.params.read_as(p.name, DType::F32);
      const Tensor got = table.view(w, p.name);
      for (int64_t i = 0; i < p.numel(); i += 7) {
        const double v = get_as_double(saved, i);
        ASSERT_EQ(get_as_double(got, i), std::string(dtype) == "float32" ? v : double(float(bf16(float(v)))))
            << p.name;
      }
    }
  }
  EXPECT_NE(testing::run_command(std::string(GEMMAX_BINARY) + " export --checkpoint " +
                                     dir.file("nope") + " --out " + dir.file("x"), &out), 0);
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
}

}  // namespace
}  // namespace gemmax

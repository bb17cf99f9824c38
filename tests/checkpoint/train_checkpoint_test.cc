// Runs that survive: checkpoints, exact resume, graceful stop, faults, fine-tuning, freezing,
// export.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "gemmax/io/atomic_file.h"
#include "gemmax/io/hf_checkpoint.h"
#include "gemmax/io/hf_config.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/train/stop_signal.h"
#include "gemmax/train/trainer.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

// A small run: the tiny structure at width 32, 4 x 32 tokens per step, on the cpu backend (the
// default) with 2 threads. The schedule length is fixed, so runs of different `steps` follow
// the same learning rates.
std::vector<std::string> run_args(const TempDir& dir, int64_t steps,
                                  std::vector<std::string> extra = {}) {
  std::vector<std::string> v = {"base_output_directory=" + dir.str(), "run_name=r",
                                "base_emb_dim=32", "max_target_length=32",
                                "per_device_batch_size=4", "learning_rate=1e-2",
                                "learning_rate_schedule_steps=8", "log_period=1000",
                                "num_threads=2", "steps=" + std::to_string(steps)};
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

// metrics.jsonl without the timing fields and the evaluations (each invocation also evaluates at
// its end, so a split run has one more; train/eval_test.cc checks them): what must match.
std::vector<std::string> loss_lines(const TempDir& dir) {
  std::vector<std::string> out;
  std::ifstream in(dir / "r/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    for (auto it = j.begin(); it != j.end();)
      it = it.key().rfind("perf/", 0) == 0 || it.key().rfind("eval/", 0) == 0 ? j.erase(it)
                                                                            : std::next(it);
    out.push_back(j.dump());
  }
  return out;
}

class ResumeThreads : public testing::WithThreads {};

TEST_P(ResumeThreads, ResumedRunEqualsUninterruptedBitForBit) {
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

INSTANTIATE_TEST_SUITE_P(Checkpoint, ResumeThreads, ::testing::Values(1, 2), testing::threads_name);

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

// eval, export and sample read a live run's newest checkpoint while the run saves a new one each
// step and deletes the old: every read finds a whole checkpoint (it used to report a healthy one
// as missing its files when the run rotated it away between the listing and the opening).
TEST(Checkpoint, ReadersOfALiveRunThatRotatesItsCheckpointsAlwaysFindOne) {
  TempDir dir;
  train(run_args(dir, 1, {"checkpoint_period=1"}));
  std::atomic<bool> done{false};
  std::string run_error;
  std::thread run([&] {
    try {
      train(run_args(dir, 8, {"checkpoint_period=1", "max_num_checkpoints_to_keep=1"}));
    } catch (const Error& e) {
      run_error = e.what();
    }
    done = true;
  });
  int loads = 0;
  std::vector<std::string> failures;
  while (!done) {
    try {
      EXPECT_GE(load_model_dir(dir / "r", DType::F32).checkpoint.step, 1);
      ++loads;
    } catch (const Error& e) {
      failures.push_back(e.what());
    }
  }
  run.join();
  EXPECT_EQ(run_error, "");
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << loads + failures.size()
                                << " reads failed, the first: " << failures[0];
  EXPECT_GT(loads, 3);
}

// The weights alone are what eval, export and sample read: a checkpoint without its optimizer
// file still loads there; resuming, which needs the moments, names the missing file.
TEST(Checkpoint, ReadingTheWeightsDoesNotNeedTheOptimizerFile) {
  TempDir dir;
  train(run_args(dir, 2));
  const std::string ckpt = list_train_checkpoints(dir / "r/checkpoints").back().dir;
  fs::remove(ckpt + "/optimizer.safetensors");
  EXPECT_EQ(load_model_dir(dir / "r", DType::F32).checkpoint.step, 2);
  expect_error([&] { Trainer t(Config::defaults(run_args(dir, 4))); },
               {"missing optimizer.safetensors"});
}

TEST(Checkpoint, FailedSaveKeepsThePreviousCheckpoint) {
  TempDir dir;
  const std::vector<std::string> args = run_args(dir, 4, {"checkpoint_period=2"});
  // The save at step 2 succeeds; the one at step 4 fails part-way, as on a full disk: from step
  // 3 on, no file may grow past half the largest file of a checkpoint (EFBIG).
  const uint64_t largest_file = [&] {
    TempDir probe;
    train(run_args(probe, 1));
    uintmax_t bytes = 0;
    for (const auto& e : fs::recursive_directory_iterator(probe / "r/checkpoints"))
      if (e.is_regular_file()) bytes = std::max(bytes, e.file_size());
    return uint64_t(bytes);
  }();
  std::optional<testing::FileSizeLimit> limit;
  TrainHooks hooks;
  hooks.before_step = [&](int64_t step) {
    if (step == 3) limit.emplace(largest_file / 2);
  };
  auto t = std::make_unique<Trainer>(Config::defaults(args), nullptr, hooks);
  std::ostringstream log;
  expect_error([&] { t->run(log); }, {"checkpoints", "File too large", "was left as it was"});
  ASSERT_TRUE(limit.has_value()) << "the run failed before step 3";
  limit.reset();
  const auto all = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].step, 2);
  EXPECT_NO_THROW(open_train_checkpoint(all[0].dir));
  for (const auto& e : fs::directory_iterator(dir / "r/checkpoints"))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
  // And the run resumes from it, once the failed one has ended (it holds the run folder).
  t.reset();
  EXPECT_EQ(Trainer(Config::defaults(args)).start_step(), 2);
}

// ---- stopping by signal ----------------------------------------------------------------------

// Starts `prefix... gemmax train args` with stdout and stderr in `log`. With `tty` (a pty's
// device), gemmax runs in a new session whose controlling terminal, and stdin, is that pty, as
// at a terminal: a Ctrl-C written to the pty's master reaches it from the terminal driver.
pid_t spawn_train(const std::vector<std::string>& prefix, std::vector<std::string> args,
                  const std::string& log, const char* tty = nullptr) {
  std::vector<std::string> words = prefix;
  words.push_back(GEMMAX_BINARY);
  words.push_back("train");
  words.insert(words.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (tty != nullptr) {
    ::setsid();
    const int fd = ::open(tty, O_RDWR);  // the first terminal a session leader opens is its own
    if (fd < 0) ::_exit(126);
    ::dup2(fd, 0);
  }
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(out, 1);
  ::dup2(out, 2);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  ::_exit(127);
}

// Waits until `text` is in the file; false after 120 s.
bool wait_for_text(const std::string& path, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (testing::read_file(path).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int wait_status(pid_t pid) {
  int status = 0;
  const pid_t r = ::waitpid(pid, &status, 0);
  EXPECT_EQ(r, pid) << std::strerror(errno);
  return status;
}

// The checks every graceful stop passes: exit 0, the stop line names the saved checkpoint, and
// no half-written folder is left.
void expect_graceful_stop(int status, const TempDir& dir, const std::string& out,
                          const std::string& signal_name) {
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << ":\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("stopped by " + signal_name), std::string::npos) << out;
  const auto saved = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_FALSE(saved.empty()) << out;
  EXPECT_NE(out.find("checkpoint saved in " + saved.back().dir), std::string::npos) << out;
  EXPECT_NO_THROW(open_train_checkpoint(saved.back().dir));
  for (const auto& e : fs::directory_iterator(dir / "r/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find('.'), std::string::npos) << e.path();
}

// SIGTERM to a real `gemmax train`: it finishes the step, saves, exits 0, and resumes to the
// same result as an uninterrupted run.
TEST(Stop, SigtermStopsGracefullyAndTheRunResumesExactly) {
  TempDir dir, whole;
  std::vector<std::string> args = run_args(dir, 8, {"log_period=1"});
  const std::string log_path = dir / "log.txt";
  const pid_t pid = spawn_train({}, args, log_path);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(log_path, "step     1 ")) << testing::read_file(log_path);
  ::kill(pid, SIGTERM);
  const int status = wait_status(pid);
  const std::string out = testing::read_file(log_path);
  expect_graceful_stop(status, dir, out, "SIGTERM");
  const auto saved = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_EQ(saved.size(), 1u) << out;
  EXPECT_LT(saved[0].step, 8);

  args.back() = "log_period=1000";
  Trainer resumed(Config::defaults(args));
  std::ostringstream log;
  resumed.run(log);
  const Tensor a = final_weights(run_args(whole, 8));
  EXPECT_EQ(0, std::memcmp(a.raw(), resumed.weights().raw(), a.nbytes()));
  EXPECT_EQ(loss_lines(whole), loss_lines(dir));
}

// Launchers repeat themselves: SIGTERM twice in a row, then SIGINT with kill(), are one request.
TEST(Stop, RepeatedSignalsFromALauncherAreOneRequest) {
  TempDir dir;
  const std::string log_path = dir / "log.txt";
  const pid_t pid = spawn_train({}, run_args(dir, 1000, {"log_period=1"}), log_path);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(log_path, "step     1 ")) << testing::read_file(log_path);
  ::kill(pid, SIGTERM);
  ::kill(pid, SIGTERM);
  // The repeats follow the first request: once they are all pending together, Linux would
  // deliver the lower-numbered SIGINT first, which is not what a launcher's sequence means.
  ASSERT_TRUE(wait_for_text(log_path, "SIGTERM: stopping after this step"))
      << testing::read_file(log_path);
  ::kill(pid, SIGTERM);
  ::kill(pid, SIGINT);
  const int status = wait_status(pid);
  expect_graceful_stop(status, dir, testing::read_file(log_path), "SIGTERM");
}

// A launcher's repeat can arrive after the run has ended, while the process exits: once a stop
// was requested the handlers stay, so it cannot kill the process. Without a request the previous
// handlers come back. In-process, so that the order of events is certain.
TEST(Stop, RepeatsAfterTheRunEndedAreHarmlessAndHandlersComeBackOtherwise) {
  struct sigaction before = {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &before), 0);
  auto current = []() {
    struct sigaction now = {};
    ::sigaction(SIGTERM, nullptr, &now);
    return now;
  };
  auto is_previous = [&](const struct sigaction& a) {
    return (a.sa_flags & SA_SIGINFO) == (before.sa_flags & SA_SIGINFO) &&
           a.sa_handler == before.sa_handler;
  };
  {
    const StopSignal stop;
    ::raise(SIGTERM);
    EXPECT_EQ(stop.received(), SIGTERM);
  }
  EXPECT_FALSE(is_previous(current()));
  ::raise(SIGTERM);  // the repeat: this process must still be alive after it
  {
    const StopSignal stop;  // a later run in the same process starts with no request
    EXPECT_EQ(stop.received(), 0);
  }
  EXPECT_TRUE(is_previous(current()));
}

// GNU timeout, signalled itself, passes SIGTERM to gemmax and then to gemmax's whole process
// group: gemmax sees it twice. The run still finishes its step, saves and exits 0 (which
// timeout returns).
TEST(Stop, SignallingTimeoutStopsTheRunGracefully) {
  TempDir dir;
  const std::string log_path = dir / "log.txt";
  const pid_t pid =
      spawn_train({"timeout", "600"}, run_args(dir, 1000, {"log_period=1"}), log_path);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(log_path, "step     1 ")) << testing::read_file(log_path);
  ::kill(pid, SIGTERM);  // to timeout, not to gemmax
  const int status = wait_status(pid);
  expect_graceful_stop(status, dir, testing::read_file(log_path), "SIGTERM");
}

// Ctrl-C twice at a terminal stops at once: gemmax dies by SIGINT without finishing its step,
// and the checkpoints on disk are only complete ones, the newest of them valid.
TEST(Stop, CtrlCTwiceAtATerminalStopsAtOnce) {
  TempDir dir;
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0) GTEST_SKIP() << "no pseudo-terminals here: " << std::strerror(errno);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const std::string tty = ::ptsname(master);
  const std::string log_path = dir / "log.txt";
  // Wider and longer rows than run_args: steps long enough to press Ctrl-C twice within one.
  const pid_t pid =
      spawn_train({},
                  run_args(dir, 1000,
                           {"log_period=1", "checkpoint_period=1", "max_num_checkpoints_to_keep=0",
                            "base_emb_dim=128", "max_target_length=256"}),
                  log_path, tty.c_str());
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(log_path, "saved checkpoint")) << testing::read_file(log_path);
  ASSERT_EQ(::write(master, "\x03", 1), 1);
  ASSERT_TRUE(wait_for_text(log_path, "Ctrl-C: stopping after this step"))
      << testing::read_file(log_path);
  ASSERT_EQ(::write(master, "\x03", 1), 1);
  const int status = wait_status(pid);
  ::close(master);
  const std::string out = testing::read_file(log_path);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status) << ":\n" << out;
  EXPECT_EQ(WTERMSIG(status), SIGINT) << out;
  EXPECT_NE(out.find("Ctrl-C again: stopping at once"), std::string::npos) << out;
  EXPECT_EQ(out.find("stopped by"), std::string::npos) << out;
  const auto saved = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_FALSE(saved.empty()) << out;
  EXPECT_NO_THROW(open_train_checkpoint(saved.back().dir));
  for (const auto& e : fs::directory_iterator(dir / "r/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find('.'), std::string::npos) << e.path();
}

// A forced stop during a save abandons it: the writes fail, the partial folder is removed and
// the previous checkpoint stays the newest, intact.
TEST(Stop, InterruptedSaveLeavesThePreviousCheckpoint) {
  TempDir dir;
  train(run_args(dir, 2));
  const std::string ckpts = dir / "r/checkpoints";
  const TrainCheckpoint before = open_train_checkpoint(list_train_checkpoints(ckpts).back().dir);
  NamedTensors params = {{"w", Tensor::zeros({1000}, DType::F32)}};
  struct Reset {
    ~Reset() { set_writes_interrupted(false); }
  } reset;
  set_writes_interrupted(true);
  expect_error([&] { save_train_checkpoint(ckpts, 3, params, params, before.state, 0); },
               {"interrupted by a forced stop"});
  set_writes_interrupted(false);
  const auto all = list_train_checkpoints(ckpts);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].step, 2);
  EXPECT_NO_THROW(open_train_checkpoint(all[0].dir));
  EXPECT_EQ(testing::TempDir::list_of(ckpts), std::vector<std::string>{"step_00000002"});
}

// Leftovers of a killed save or deletion (step_N.tmp, step_N.old) are never taken for
// checkpoints, and the next save removes them.
TEST(Stop, LeftoversOfKilledSavesAreIgnoredThenRemoved) {
  TempDir dir;
  train(run_args(dir, 2));
  const std::string ckpts = dir / "r/checkpoints";
  fs::create_directories(ckpts + "/step_00000003.tmp");
  testing::write_file(ckpts + "/step_00000003.tmp/state.json", "{}");
  fs::copy(ckpts + "/step_00000002", ckpts + "/step_00000001.old");
  ASSERT_EQ(list_train_checkpoints(ckpts).size(), 1u);
  train(run_args(dir, 4));
  EXPECT_EQ(testing::TempDir::list_of(ckpts),
            (std::vector<std::string>{"step_00000002", "step_00000004"}));
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

// Every shape that trains exports and loads: one whose last layer would be sliding (which
// transformers cannot hold) is refused before training, naming the fix; a non-periodic
// layer_types list with a global last layer trains, exports and reads back the same kinds.
TEST(Export, EveryShapeThatTrainsExports) {
  TempDir dir;
  expect_error([&] { train(run_args(dir, 1, {"base_num_decoder_layers=8"})); },
               {"cannot be trained", "last layer (7) is a sliding layer",
                "multiple of sliding_window_pattern (6)", "layer_types"});
  // Each of the HF writer's refusals is refused before training too.
  expect_error([&] { train(run_args(dir, 1, {"norm_topk_prob=false"})); },
               {"cannot be trained", "norm_topk_prob is false", "set norm_topk_prob=true"});
  expect_error(
      [&] { train(run_args(dir, 1, {"share_kv_projections=false"})); },
      {"cannot be trained", "K = V", "global_num_kv_heads (1)", "set global_num_kv_heads=2"});
  EXPECT_FALSE(fs::exists(dir / "r/checkpoints"));
  // Without K = V and with as many global KV heads as sliding ones, it trains and exports.
  train(run_args(dir, 1, {"run_name=kv", "share_kv_projections=false", "global_num_kv_heads=0"}));
  std::string kv_out;
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " export --checkpoint " +
                                     dir.file("kv") + " --out " + dir / "hf_kv",
                                 &kv_out),
            0)
      << kv_out;
  EXPECT_FALSE(read_hf_model_folder(dir / "hf_kv").config.share_kv_projections);
  const std::string s = "sliding_attention,", f = "full_attention";
  const std::string types = s + f + "," + s + s + s + s + s + f;  // not periodic
  train(run_args(dir, 1, {"base_num_decoder_layers=8", "layer_types=" + types}));
  std::string out;
  const std::string hf = dir / "hf";
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " export --checkpoint " +
                                     dir.file("r") + " --out " + hf, &out), 0) << out;
  const HfModelFolder folder = read_hf_model_folder(hf);
  EXPECT_EQ(folder.config.layer_types, types);
  EXPECT_EQ(folder.config.num_global_layers(), 2);
}

}  // namespace
}  // namespace gemmax

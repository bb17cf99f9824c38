// One owner per run folder: the lock, its refusal naming the holder, stale locks, and two
// `gemmax train` processes racing for one run folder.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "gemmax/io/run_lock.h"
#include "gemmax/io/tfevents.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

std::string host() {
  char h[256] = {};
  ::gethostname(h, sizeof h - 1);
  return h;
}

TEST(RunLock, ASecondHolderIsRefusedNamingTheFirstsPidAndHost) {
  TempDir dir;
  const std::string run = dir / "out/run";
  RunDirLock first(run);
  EXPECT_TRUE(first.recovered().empty());
  // flock conflicts between two opens of the file, even within one process.
  expect_error([&] { RunDirLock second(run); },
               {run, "in use by another gemmax run", "pid " + std::to_string(::getpid()),
                "host " + host(), "run_name"});
  EXPECT_EQ(testing::TempDir::list_of(run), std::vector<std::string>{"gemmax.lock"});
}

TEST(RunLock, AStaleLockOfADeadProcessIsTakenOverAndNamed) {
  TempDir dir;
  const std::string run = dir / "run";
  fs::create_directories(run);
  // What a run killed by SIGKILL leaves: its name in a file nobody holds.
  testing::write_file(run + "/gemmax.lock", "pid=999999 host=elsewhere started=2026-11-30T08:00:00Z\n");
  {
    RunDirLock lock(run);
    EXPECT_NE(lock.recovered().find("pid 999999 on host elsewhere"), std::string::npos)
        << lock.recovered();
    EXPECT_NE(testing::read_file(run + "/gemmax.lock").find("pid=" + std::to_string(::getpid())),
              std::string::npos);
  }
  // A clean end leaves the file empty: the next run has nothing to recover.
  EXPECT_EQ(testing::read_file(run + "/gemmax.lock"), "");
  RunDirLock again(run);
  EXPECT_TRUE(again.recovered().empty());
}

TEST(RunLock, AFailedStartLeavesNoFolderBehind) {
  TempDir dir;
  { RunDirLock lock(dir / "a/b/run"); }
  EXPECT_TRUE(dir.list().empty()) << "the lock removes the folders it made when nothing else was written";
  fs::create_directories(dir / "kept/run");
  { RunDirLock lock(dir / "kept/run"); }
  EXPECT_TRUE(fs::exists(dir / "kept/run/gemmax.lock")) << "an existing folder is left as found";
}

// ---- two processes ---------------------------------------------------------------------------

pid_t spawn_train(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    f = std::freopen(log.c_str(), "a", stderr);
    (void)f;
    std::vector<std::string> a = args;
    std::vector<char*> argv = {const_cast<char*>(GEMMAX_BINARY), const_cast<char*>("train")};
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(GEMMAX_BINARY, argv.data());
    ::_exit(127);
  }
  return pid;
}

size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

// Two `gemmax train` on one run folder, started together, 20 times. The loser is refused at
// once, naming the winner's pid, and writes nothing; the winner, stopped by SIGTERM once it has
// trained a few steps, keeps every step in metrics.jsonl and its TensorBoard file and saves a
// checkpoint of exactly those steps.
TEST(RunLock, TwoProcessesRacingForOneRunFolderOneIsRefusedEveryTime) {
  TempDir dir;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string run_name = "race" + std::to_string(round);
    const std::string run = dir / run_name;
    const std::vector<std::string> args = {
        "base_output_directory=" + dir.str(), "run_name=" + run_name, "base_emb_dim=32",
        "per_device_batch_size=1", "max_target_length=16", "steps=1000000",
        "learning_rate_schedule_steps=100", "checkpoint_period=0", "log_period=1000000",
        "sample_max_new_tokens=0"};
    const std::string logs[2] = {dir / (run_name + ".a.log"), dir / (run_name + ".b.log")};
    pid_t pids[2] = {spawn_train(args, logs[0]), spawn_train(args, logs[1])};
    ASSERT_GT(pids[0], 0);
    ASSERT_GT(pids[1], 0);
    // The first to exit is the loser.
    int status = 0;
    const pid_t first = ::waitpid(-1, &status, 0);
    ASSERT_TRUE(first == pids[0] || first == pids[1]);
    const int loser = first == pids[0] ? 0 : 1, winner = 1 - loser;
    const std::string loser_log = testing::read_file(logs[loser]);
    ASSERT_TRUE(WIFEXITED(status)) << loser_log;
    EXPECT_EQ(WEXITSTATUS(status), 1) << loser_log;
    EXPECT_NE(loser_log.find("in use by another gemmax run (pid " + std::to_string(pids[winner]) +
                             " on host " + host()),
              std::string::npos)
        << loser_log;
    // The winner trains; stop it after a few steps.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (count_lines(run + "/metrics.jsonl") < 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::kill(pids[winner], SIGTERM);
    ASSERT_EQ(::waitpid(pids[winner], &status, 0), pids[winner]);
    const std::string winner_log = testing::read_file(logs[winner]);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << winner_log;
    // Complete: every step once, in metrics.jsonl, the event file and the checkpoint.
    const std::vector<CheckpointRef> ckpts = list_train_checkpoints(run + "/checkpoints");
    ASSERT_EQ(ckpts.size(), 1u) << winner_log;
    const int64_t steps = ckpts[0].step;
    EXPECT_GE(steps, 3);
    std::ifstream in(run + "/metrics.jsonl");
    int64_t expect = 0;
    for (std::string line; std::getline(in, line); ++expect)
      EXPECT_EQ(nlohmann::json::parse(line)["step"].get<int64_t>(), expect);
    EXPECT_EQ(expect, steps);
    const std::vector<std::string> events = list_event_files(run + "/tensorboard");
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(int64_t(read_tfrecords(events[0]).records.size()), steps + 1);  // + file_version
    EXPECT_TRUE(fs::exists(run + "/memory.json"));
    EXPECT_EQ(testing::read_file(run + "/gemmax.lock"), "") << "released at the end";
  }
}

}  // namespace
}  // namespace gemmax

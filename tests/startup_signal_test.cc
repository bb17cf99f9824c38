// Signals from the first instruction to the last: SIGTERM before training starts ends
// `gemmax train` at once with status 0, saying nothing was started; SIGTERM while the weights
// load ends it after the load, with status 0, having written nothing. (The signals are raised
// by the fault tests' driver, gemmax_fault_train, at fixed points, so that the tests do not depend
// on timing.)
#include <gtest/gtest.h>

#include <filesystem>

#include "gemmax/checkpoint/train_checkpoint.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;
using testing::run_command;
using testing::TempDir;

struct Result {
  int status;
  std::string out;
};

// `gemmax train`, or with `fault` (RANK:STEP:KIND) the fault tests' driver, which trains alike.
Result train(const TempDir& dir, const std::string& extra, const std::string& fault = "") {
  Result r;
  const std::string program =
      fault.empty() ? std::string(GEMMAX_BINARY) + " train" : GEMMAX_FAULT_TRAIN + (" " + fault);
  r.status = run_command(program + " base_output_directory=" + dir.str() +
                             " run_name=r base_emb_dim=32 max_target_length=16 " +
                             "per_device_batch_size=1 sample_max_new_tokens=0 " + extra,
                         &r.out);
  return r;
}

TEST(StartupSignal, BeforeTrainingStartsTheRunExitsAtOnceWithZero) {
  TempDir dir;
  const Result r = train(dir, "steps=5", "0:-2:sigterm");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("SIGTERM before training started: nothing was started"), std::string::npos)
      << r.out;
  EXPECT_TRUE(dir.list().empty()) << "nothing written";
}

TEST(StartupSignal, WhileLoadingTheRunEndsAfterTheLoadWritingNothing) {
  TempDir dir;
  // A fresh run: nothing at all is left behind.
  Result r = train(dir, "steps=5", "0:-1:sigterm");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("SIGTERM while loading: stopping when the load ends"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("stopped by SIGTERM while loading; nothing was written"), std::string::npos)
      << r.out;
  EXPECT_TRUE(dir.list().empty()) << "nothing written";

  // A resumed run: its files stay byte for byte as they were.
  r = train(dir, "steps=2");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string metrics = testing::read_file(dir / "r/metrics.jsonl");
  const std::string config = testing::read_file(dir / "r/config.yml");
  r = train(dir, "steps=4", "0:-1:sigterm");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("while loading; nothing was written"), std::string::npos) << r.out;
  EXPECT_EQ(testing::read_file(dir / "r/metrics.jsonl"), metrics);
  EXPECT_EQ(testing::read_file(dir / "r/config.yml"), config);
  const std::vector<CheckpointRef> saved = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].step, 2);
  // And the next start resumes as if nothing had happened.
  r = train(dir, "steps=4");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gemmax

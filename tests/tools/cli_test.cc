// The gemmax binary: bad input gives a clear message and a non-zero exit.
#include <gtest/gtest.h>

#include <filesystem>

#include "gemmax/data/token_shard.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::run_command;
using testing::TempDir;

using Result = testing::CliResult;
constexpr auto& gemmax = testing::run_gemmax;

void expect_failure(const std::string& args, const std::vector<std::string>& parts) {
  const Result r = gemmax(args);
  EXPECT_NE(r.status, 0) << args;
  for (const auto& p : parts) EXPECT_NE(r.out.find(p), std::string::npos) << args << ":\n" << r.out;
}

TEST(Cli, TrainRejectsBadConfigWithTheFix) {
  TempDir dir;
  const std::string out = " base_output_directory=" + dir.str();
  expect_failure("train learning_rat=0.1" + out, {"unknown config key 'learning_rat'", "did you mean 'learning_rate'"});
  expect_failure("train steps=ten" + out, {"'steps' expects int", "got 'ten'"});
  expect_failure("train model_name=gemma9" + out, {"unknown model_name 'gemma9'", "gemma4-small"});
  expect_failure("train nothing.yml" + out, {"cannot read config file 'nothing.yml'"});
  expect_failure("train dataset_type=shards dataset_path=" + dir.file("none.bin") + out, {"none.bin"});
  EXPECT_TRUE(dir.list().empty()) << "a failed run wrote into base_output_directory";
}

TEST(Cli, TrainRejectsBadShards) {
  TempDir dir;
  const std::string out = " base_output_directory=" + dir.file("runs") + " steps=1";
  testing::write_file(dir / "magic.bin", std::string(64, 'x') + std::string(400, '\0'));
  expect_failure("train dataset_type=shards dataset_path=" + dir.file("magic.bin") + out, {"magic"});
  testing::write_file(dir / "short.bin", "GMXTOKEN");
  expect_failure("train dataset_type=shards dataset_path=" + dir.file("short.bin") + out, {"short.bin"});
  {  // tokens of a larger tokenizer than the model's vocabulary
    ShardWriter w(dir / "big.bin", 1000, 1, 2, 0);
    std::vector<int32_t> doc(600);
    for (size_t i = 0; i < doc.size(); ++i) doc[i] = int32_t(3 + i);
    w.add_document(doc, true);
    w.finish();
  }
  expect_failure("train dataset_type=shards dataset_path=" + dir.file("big.bin") + out,
                 {"big.bin", "259"});
  {  // too little data for one row of max_target_length
    ShardWriter w(dir / "tiny.bin", 259, 1, 2, 0);
    w.add_document(std::vector<int32_t>{10, 11, 12}, true);
    w.finish();
  }
  expect_failure("train dataset_type=shards dataset_path=" + dir.file("tiny.bin") + out,
                 {"max_target_length"});
  EXPECT_FALSE(std::filesystem::exists(dir / "runs"));
}

TEST(Cli, UnknownCommandAndFlags) {
  expect_failure("trian", {"unknown command 'trian'", "train"});
  expect_failure("grad --modle x", {"unknown flag --modle", "did you mean --model"});
  expect_failure("grad --tokens t", {"missing --model"});
}

TEST(Cli, InfoCountsTheRealModelWithoutAllocatingIt) {
  const Result r = gemmax("info model_name=gemma4-26b-a4b per_device_batch_size=1 max_target_length=4096");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("25233141790 total"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3822530590"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("102.558 TFLOP"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gemmax

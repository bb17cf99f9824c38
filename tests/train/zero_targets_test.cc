// Loss masks that count nothing: an evaluation with no counted target is an error, not a loss
// of 0 (perplexity 1, and target_eval_loss stopping the run as converged); a training step with
// no counted target says so.
#include <gtest/gtest.h>

#include "gemmax/data/token_shard.h"
#include "test_util.h"

namespace gemmax {
namespace {

// A shard of 20 documents: with `completions`, each document's last 6 tokens count in the loss;
// without, its masks mark nothing.
std::string masked_shard(const testing::TempDir& dir, const char* name, bool completions) {
  const std::string path = dir / name;
  ShardWriter w(path, 259, 1, 2, 0);
  for (int d = 0; d < 20; ++d) {
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
    for (int i = 0; i < 12; ++i) ids.push_back(3 + (d * 7 + i * 13) % 250), mask.push_back(completions && i >= 6);
    w.add_document(ids, true, mask);
  }
  w.finish();
  return path;
}

std::string train_command(const testing::TempDir& dir, const std::string& train, const std::string& eval,
                          const std::string& extra) {
  return std::string(GEMMAX_BINARY) + " train base_output_directory=" + dir.str() +
         " run_name=r backend=reference dtype=float32 weight_dtype=float32 base_emb_dim=32 "
         "max_target_length=16 per_device_batch_size=1 packing=false enable_data_shuffling=false steps=2 "
         "sample_max_new_tokens=0 dataset_type=shards sft_train_on_completion_only=true "
         "dataset_path=" + train + " eval_dataset_path=" + eval + " eval_interval=2 eval_steps=2 " + extra;
}

TEST(ZeroTargets, AnEvaluationThatCountsNothingIsAnErrorNotAPerfectScore) {
  testing::TempDir dir;
  const std::string some = masked_shard(dir, "some.bin", true), none = masked_shard(dir, "none.bin", false);
  std::string out;
  EXPECT_EQ(testing::run_command(train_command(dir, some, none, "target_eval_loss=0.5"), &out), 1) << out;
  for (const char* part : {"counted no target token", "loss masks mark nothing", "eval_interval=-1"})
    EXPECT_NE(out.find(part), std::string::npos) << part << " in:\n" << out;
  EXPECT_EQ(out.find("target_eval_loss"), out.find("target_eval_loss 0.5"))  // never "reached"
      << out;
  // The same run evaluated on shards with completions succeeds.
  testing::TempDir ok;
  std::string ok_out;
  EXPECT_EQ(testing::run_command(train_command(ok, some, some, ""), &ok_out), 0) << ok_out;
}

TEST(ZeroTargets, ATrainingStepThatCountsNothingSaysSo) {
  testing::TempDir dir;
  const std::string none = masked_shard(dir, "none.bin", false), some = masked_shard(dir, "some.bin", true);
  std::string out;
  EXPECT_EQ(testing::run_command(train_command(dir, none, some, ""), &out), 0) << out;
  EXPECT_NE(out.find("warning: step 0 counted no target token"), std::string::npos) << out;
  testing::TempDir ok;
  std::string ok_out;
  EXPECT_EQ(testing::run_command(train_command(ok, some, some, ""), &ok_out), 0) << ok_out;
  EXPECT_EQ(ok_out.find("counted no target token"), std::string::npos) << ok_out;
}

}  // namespace
}  // namespace gemmax

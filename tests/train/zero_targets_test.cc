// Loss masks that count nothing: data whose masks mark nothing a step could count is refused
// before training, for evaluation (a loss of 0, perplexity 1 and target_eval_loss stopping the
// run as converged) as for training (lm_loss 0, nothing learnt); a step whose batch happens to
// count nothing says so and is counted.
#include <gtest/gtest.h>

#include "gemmax/data/token_shard.h"
#include "test_util.h"

namespace gemmax {
namespace {

// A shard of 20 documents of 12 tokens: with `completions`, each document's tokens from
// `from` on count in the loss; without, its masks mark nothing. `empty_doc` (if >= 0) counts
// nothing in any case.
std::string masked_shard(const testing::TempDir& dir, const char* name, bool completions,
                         int from = 6, int empty_doc = -1) {
  const std::string path = dir / name;
  ShardWriter w(path, 259, 1, 2, 0);
  for (int d = 0; d < 20; ++d) {
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
    for (int i = 0; i < 12; ++i)
      ids.push_back(3 + (d * 7 + i * 13) % 250),
          mask.push_back(completions && i >= from && d != empty_doc);
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
  for (const char* part :
       {"none.bin", "mark nothing a step could count", "no target token", "eval_interval=-1"})
    EXPECT_NE(out.find(part), std::string::npos) << part << " in:\n" << out;
  EXPECT_EQ(out.find("target_eval_loss"), out.find("target_eval_loss 0.5"))  // never "reached"
      << out;
  EXPECT_EQ(out.find("step     0"), std::string::npos) << "refused before training:\n" << out;
  // The same run evaluated on shards with completions succeeds.
  testing::TempDir ok;
  std::string ok_out;
  EXPECT_EQ(testing::run_command(train_command(ok, some, some, ""), &ok_out), 0) << ok_out;
}

// Training data whose masks mark nothing a row could count trains at lm_loss 0 and learns
// nothing: refused before the first step, naming the data and the fixes; so are masks that mark
// only tokens past what use_truncation=true keeps of each document.
TEST(ZeroTargets, TrainingDataThatCountsNothingIsRefusedBeforeTheFirstStep) {
  testing::TempDir dir;
  const std::string none = masked_shard(dir, "none.bin", false), some = masked_shard(dir, "some.bin", true);
  std::string out;
  EXPECT_EQ(testing::run_command(train_command(dir, none, some, ""), &out), 1) << out;
  for (const char* part :
       {"sft_train_on_completion_only=true but the loss masks of", "none.bin",
        "mark nothing a step could count", "gemmax tokenize", "sft_train_on_completion_only=false"})
    EXPECT_NE(out.find(part), std::string::npos) << part << " in:\n" << out;
  EXPECT_EQ(out.find("step     0"), std::string::npos) << "refused before training:\n" << out;
  // Completions only past the 8 tokens a row keeps of each document (bos and 7 ids).
  const std::string late = masked_shard(dir, "late.bin", true, 10);
  const std::string rows = " max_target_length=8 use_truncation=true";
  std::string late_out;
  EXPECT_EQ(testing::run_command(train_command(dir, late, some, rows), &late_out), 1) << late_out;
  EXPECT_NE(late_out.find("within the first max_target_length tokens"), std::string::npos)
      << late_out;
  // Without truncation the completions are reached and the run trains.
  testing::TempDir cut;
  std::string cut_out;
  EXPECT_EQ(testing::run_command(train_command(cut, late, some, " max_target_length=8"), &cut_out),
            0)
      << cut_out;
}

// Data that counts targets can still give a step whose global batch counts none (rows of
// prompt only): the run goes on, says so at the first, and counts them in its summary.
TEST(ZeroTargets, AStepWhoseBatchCountsNothingSaysSoAndIsCounted) {
  testing::TempDir dir;
  const std::string mixed = masked_shard(dir, "mixed.bin", true, 6, 3),
                    some = masked_shard(dir, "some.bin", true);
  std::string out;
  EXPECT_EQ(testing::run_command(train_command(dir, mixed, some, "steps=6 eval_interval=-1"), &out),
            0)
      << out;
  EXPECT_NE(out.find("warning: step 3 counted no target token"), std::string::npos) << out;
  EXPECT_NE(out.find("1 of 6 steps counted no target token"), std::string::npos) << out;
  testing::TempDir ok;
  std::string ok_out;
  EXPECT_EQ(testing::run_command(train_command(ok, some, some, ""), &ok_out), 0) << ok_out;
  EXPECT_EQ(ok_out.find("counted no target token"), std::string::npos) << ok_out;
}

}  // namespace
}  // namespace gemmax

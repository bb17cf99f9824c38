// The command line over a Hugging Face dataset: `gemmax tokenize --hf_path` writes the shard the
// library writes, and `gemmax train dataset_type=hf` trains on a split and evaluates on another
// (MaxText's keys, a YAML list of columns, the chat template of chat_template_path).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "gemmax/data/tokenize_files.h"
#include "test_util.h"

namespace gemmax {
namespace {

const std::string kChat = std::string(GEMMAX_SOURCE_DIR) + "/tests/data/fixtures/hf/chat";

std::string write_template(const testing::TempDir& dir) {
  const std::string path = dir / "chat.jinja";
  testing::write_file(path, "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}");
  return path;
}

TEST(HfDataCli, TokenizeWritesTheLibrarysShard) {
  if (!GEMMAX_ARROW_MODULE_BUILT) GTEST_SKIP() << "built without Arrow";
  testing::TempDir dir;
  const std::string tmpl = write_template(dir);
  std::string out;
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " tokenize --out " + (dir / "cli.bin") +
                                     " --hf_path " + kChat + " --split test_sft --data_columns messages"
                                     " --chat_template_path " + tmpl, &out), 0) << out;
  EXPECT_NE(out.find("1 conversations: loss mask on the assistant turns"), std::string::npos) << out;
  TokenizeOptions o;
  o.out = dir / "lib.bin";
  o.hf_path = kChat;
  o.split = "test_sft";
  o.data_columns = {"messages"};
  o.chat_template_path = tmpl;
  tokenize_files(o);
  EXPECT_EQ(testing::read_file(dir / "cli.bin"), testing::read_file(dir / "lib.bin"));
  // The split is named, with the ones there are, when it is not there.
  EXPECT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " tokenize --out " + (dir / "x.bin") +
                                     " --hf_path " + kChat + " --data_columns messages", &out), 1);
  EXPECT_NE(out.find("no data file for split 'train'"), std::string::npos) << out;
}

TEST(HfDataCli, TrainOnOneSplitAndEvaluateOnAnother) {
  if (!GEMMAX_ARROW_MODULE_BUILT) GTEST_SKIP() << "built without Arrow";
  testing::TempDir dir;
  const std::string tmpl = write_template(dir);
  testing::write_file(dir / "run.yml",
                      "dataset_type: hf\nhf_path: " + kChat + "\ntrain_split: 'train_sft'\n"
                      "hf_eval_split: 'test_sft'\ntrain_data_columns: ['messages']\n"
                      "eval_data_columns: ['messages']\nsft_train_on_completion_only: true\n"
                      "chat_template_path: " + tmpl + "\n");
  std::string out;
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " train " + (dir / "run.yml") +
                                     " base_output_directory=" + dir.str() + " run_name=r steps=2"
                                     " max_target_length=48 per_device_batch_size=1 eval_interval=2"
                                     " eval_steps=1 sample_max_new_tokens=0", &out), 0) << out;
  EXPECT_NE(out.find("split train_sft of"), std::string::npos) << out;
  EXPECT_NE(out.find("3 conversations"), std::string::npos) << out;
  EXPECT_NE(out.find("packed first-fit in MaxText's HF-pipeline order"), std::string::npos) << out;
  std::ifstream metrics(dir / "r/metrics.jsonl");
  bool evaluated = false;
  for (std::string line; std::getline(metrics, line);)
    evaluated |= nlohmann::json::parse(line).contains("eval/avg_loss");
  EXPECT_TRUE(evaluated) << "no eval/avg_loss in metrics.jsonl";
}

// MaxText's base.yml says tokenizer_type: "sentencepiece", and its HF pipeline loads
// tokenizer_path with AutoTokenizer whatever that says: so a run of sft.yml over a release's
// tokenizer.json trains, the file read as what it is, and says so; off dataset_type=hf the same
// mismatch is still an error.
TEST(HfDataCli, TokenizerTypeOfBaseYmlDoesNotApplyToHfData) {
  if (!GEMMAX_ARROW_MODULE_BUILT) GTEST_SKIP() << "built without Arrow";
  testing::TempDir dir;
  const std::string tok = std::string(GEMMAX_SOURCE_DIR) + "/tests/data/fixtures/tokenizer_json/gemma";
  const std::string run = std::string(GEMMAX_BINARY) + " train tokenizer_type=sentencepiece"
                          " tokenizer_path=" + tok + " vocab_size=768 base_output_directory=" +
                          dir.str() + " steps=1 max_target_length=32 per_device_batch_size=1"
                          " sample_max_new_tokens=0";
  std::string out;
  ASSERT_EQ(testing::run_command(run + " run_name=hf dataset_type=hf hf_path=" + kChat +
                                     " train_split=train_sft train_data_columns=messages"
                                     " chat_template_path=" + write_template(dir), &out), 0) << out;
  EXPECT_NE(out.find("tokenizer_type=sentencepiece does not apply to dataset_type=hf"),
            std::string::npos) << out;
  EXPECT_NE(out.find("tokenizer huggingface"), std::string::npos) << out;
  EXPECT_NE(testing::run_command(run + " run_name=builtin dataset_type=builtin", &out), 0) << out;
  EXPECT_NE(out.find("tokenizer_type=sentencepiece but tokenizer_path"), std::string::npos) << out;
}

}  // namespace
}  // namespace gemmax

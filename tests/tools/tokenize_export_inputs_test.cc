// gemmax tokenize never writes over what it reads: the files of --chat_template_dir included.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gemmax {
namespace {

TEST(TokenizeInputs, TheOutputOverATemplateFolderFileIsRefusedAndTheFileKept) {
  testing::TempDir dir;
  const std::string tmpl = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
  testing::write_file(dir / "chat_template.jinja", tmpl);
  testing::write_file(dir / "chat.jsonl",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                      "{\"role\": \"assistant\", \"content\": \"hello\"}]}\n");
  for (const char* target : {"chat_template.jinja", "tokenizer_config.json"}) {
    std::string out;
    const std::string cmd = std::string(GEMMAX_BINARY) + " tokenize --out " + (dir / target) +
                            " --chat_template_dir " + dir.str() + " " + (dir / "chat.jsonl");
    EXPECT_EQ(testing::run_command(cmd, &out), 1) << out;
    EXPECT_NE(out.find("--chat_template_dir's " + std::string(target)), std::string::npos) << out;
    EXPECT_EQ(testing::read_file(dir / "chat_template.jinja"), tmpl);
  }
  std::string out;
  EXPECT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " tokenize --out " + (dir / "c.bin") +
                                     " --chat_template_dir " + dir.str() + " " + (dir / "chat.jsonl"),
                                 &out),
            0)
      << out;
}

}  // namespace
}  // namespace gemmax

namespace gemmax {
namespace {

// gemmax export --out over the folder the run started from (load_parameters_path) is refused:
// it would replace the base model with the fine-tuned one.
TEST(ExportInputs, TheOutputOverTheRunsBaseModelIsRefused) {
  testing::TempDir dir;
  const std::string run = std::string(GEMMAX_BINARY) + " train backend=reference steps=1 "
                          "sample_max_new_tokens=0 eval_interval=-1 per_device_batch_size=1 "
                          "max_target_length=32 base_output_directory=" + dir.str();
  std::string out;
  ASSERT_EQ(testing::run_command(run + " run_name=base", &out), 0) << out;
  const std::string base = dir / "hf_base";
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " export --checkpoint " +
                                     (dir / "base") + " --out " + base, &out), 0) << out;
  ASSERT_EQ(testing::run_command(run + " run_name=tuned load_parameters_path=" + base, &out), 0) << out;
  const std::string config_before = testing::read_file(base + "/config.json");
  std::string refused;
  EXPECT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " export --checkpoint " +
                                     (dir / "tuned") + " --out " + base, &refused), 1) << refused;
  EXPECT_NE(refused.find("load_parameters_path"), std::string::npos) << refused;
  EXPECT_EQ(testing::read_file(base + "/config.json"), config_before);
}

}  // namespace
}  // namespace gemmax

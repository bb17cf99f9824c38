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

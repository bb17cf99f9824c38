// `gemmax chat` through the binary: the replies it streams equal ChatSession's on the same
// weights, one-shot, turn by turn from standard input, and per JSONL conversation; a folder
// without a template says where one goes.
#include <gtest/gtest.h>

#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/io/hf_checkpoint.h"
#include "gemmax/io/hf_config.h"
#include "gemmax/model/chat.h"
#include "test_util.h"

namespace gemmax {
namespace {
using json = nlohmann::ordered_json;
using testing::TempDir;

constexpr const char* kChatMl = testing::kChatMlTemplate;

struct Folder {
  TempDir dir;
  ModelConfig cfg = testing::byte_config();
  Tensor w;
  Folder() {
    const ParamTable table(cfg);
    w = testing::random_weights(table, 4, DType::F32);
    write_hf_checkpoint(dir.str(), hf_named_tensors(table, w, "model.", DType::F32), 1 << 30);
    write_hf_config(cfg, DType::F32, dir / "config.json");
    testing::write_file(dir / "chat_template.jinja", kChatMl);
  }
  // The replies ChatSession gives to these user turns, in one conversation.
  std::vector<std::string> replies(const std::vector<std::string>& turns, json start = {}) const {
    ReferenceBackend be;
    Gemma4Model m(cfg, be, {DType::F32, RematPolicy::None, 1});
    const auto tok = make_byte_tokenizer();
    const ChatTemplate chat(ChatTemplateSource{kChatMl, "t"});
    ChatOptions o;
    o.sample = {.max_new_tokens = 6, .temperature = 0};
    ChatSession s(m, w, *tok, chat, o, start.is_null() ? json::object() : start);
    std::vector<std::string> out;
    if (turns.empty()) out.push_back(s.reply().text);
    for (const std::string& t : turns) out.push_back(s.say(t).text);
    return out;
  }
};

std::string run(const std::string& args, int* status) {
  std::string out;
  *status = testing::run_command("(" + std::string(GEMMAX_BINARY) + " chat " + args +
                                     " 2>/dev/null)", &out);
  return out;
}

TEST(ChatCli, RepliesAsTheSessionDoes) {
  const Folder f;
  const std::string common = " --model " + f.dir.str() + " --max_new_tokens 6 --temperature 0";
  int status = 0;
  std::string out = run(common + " --prompt 'Hello'", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out, f.replies({"Hello"})[0] + "\n");

  // Turn by turn from standard input (not a terminal): one reply per line, one conversation.
  testing::write_file(f.dir / "turns.txt", "Hello\n\nAnd again\n");
  out = run(common + " < " + f.dir.file("turns.txt"), &status);
  ASSERT_EQ(status, 0) << out;
  const auto two = f.replies({"Hello", "And again"});
  EXPECT_EQ(out, two[0] + "\n" + two[1] + "\n");

  // One reply per JSONL conversation.
  const json line = {{"messages", {{{"role", "system"}, {"content", "Be brief."}},
                                   {{"role", "user"}, {"content", "Hi"}}}}};
  testing::write_file(f.dir / "c.jsonl", line.dump() + "\n" + line.dump() + "\n");
  out = run(common + " --messages " + f.dir.file("c.jsonl"), &status);
  ASSERT_EQ(status, 0) << out;
  const std::string one = f.replies({}, line)[0];
  EXPECT_EQ(out, one + "\n" + one + "\n");
}

TEST(ChatCli, BadInputGivesTheFix) {
  const Folder f;
  const std::string model = " --model " + f.dir.str();
  std::string out;
  const auto err = [&](const std::string& args) {
    testing::run_command(std::string(GEMMAX_BINARY) + " chat " + args + " 2>&1", &out);
    return out;
  };
  EXPECT_NE(err(model + " --prompt a --messages b").find("not both"), std::string::npos) << out;
  EXPECT_NE(err(model + " --max_length 8 --max_new_tokens 8 --prompt a").find("--max_length"),
            std::string::npos) << out;
  std::filesystem::remove(f.dir / "chat_template.jinja");
  EXPECT_NE(err(model + " --prompt a").find("has no chat template"), std::string::npos) << out;
  testing::write_file(f.dir / "bad.jsonl", "{\"messages\": 3}\n");
  EXPECT_NE(err(model + " --chat_template_path /dev/null --messages " + f.dir.file("bad.jsonl"))
                .find("bad.jsonl:1"),
            std::string::npos) << out;
}

}  // namespace
}  // namespace gemmax

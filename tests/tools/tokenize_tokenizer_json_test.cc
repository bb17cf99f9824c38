// `gemmax tokenize --tokenizer_path` with a Hugging Face model folder, its tokenizer.json, and the
// SentencePiece model it was converted from: the same shard from each, on any thread count.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gemmax/data/hf_tokenizer.h"
#include "gemmax/data/token_shard.h"
#include "gemmax/data/tokenizer.h"
#include "test_util.h"

namespace gemmax {
namespace {

const std::string kGemma =
    std::string(GEMMAX_SOURCE_DIR) + "/tests/data/fixtures/tokenizer_json/gemma";

TEST(TokenizeCli, TokenizerJsonFolderFileAndModelGiveOneShard) {
  testing::TempDir dir;
  testing::write_file(
      dir / "docs.jsonl",
      "{\"text\": \"The river found 12 bright stones.\"}\n"
      "{\"text\": \"def f(x):\\n    return x * 2\\n\"}\n"
      "{\"text\": \"caf\\u00e9 \\ud83d\\ude00 <start_of_turn>user\\nhi<end_of_turn>\"}\n");
  std::string first;
  for (const std::string& tok : {kGemma, kGemma + "/tokenizer.json", kGemma + "/tokenizer.model"})
    for (const char* threads : {"1", "2"}) {
      const std::string out = dir / "s.bin";
      std::filesystem::remove(out);
      const auto r = testing::run_gemmax("tokenize --out " + out + " --tokenizer_path " + tok +
                                         " --num_threads " + threads + " " + (dir / "docs.jsonl"));
      ASSERT_EQ(r.status, 0) << r.out;
      EXPECT_NE(r.out.find("3 documents"), std::string::npos) << r.out;
      const std::string shard = testing::read_file(out);
      if (first.empty()) first = shard;
      EXPECT_TRUE(shard == first) << tok << " on " << threads << " threads";
    }
  const auto r = testing::run_gemmax("tokenize --out " + (dir / "x.bin") +
                                     " --tokenizer huggingface" + " --tokenizer_path " + kGemma +
                                     "/tokenizer.model " + (dir / "docs.jsonl"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("tokenizer_type=huggingface but"), std::string::npos) << r.out;
}

// A rendered chat turn's markers are single tokens, never their characters.
TEST(TokenizeCli, ChatTurnMarkersAreOneTokenEach) {
  testing::TempDir dir;
  testing::write_file(dir / "chat.jsonl",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                      "{\"role\": \"assistant\", \"content\": \"hello\"}]}\n");
  const std::string tmpl =
      "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% "
      "endfor %}";
  testing::write_file(dir / "t.jinja", tmpl);
  const auto r = testing::run_gemmax("tokenize --out " + (dir / "c.bin") + " --tokenizer_path " +
                                     kGemma + " --chat_template_path " + (dir / "t.jinja") + " " +
                                     (dir / "chat.jsonl"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto tok = make_tokenizer("auto", kGemma);
  const auto& hf = dynamic_cast<const hf::HfTokenizer&>(*tok);
  TokenShard s(dir / "c.bin");
  size_t starts = 0, ends = 0;
  for (uint32_t id : s.tokens()) {
    starts += int32_t(id) == hf.token_to_id("<start_of_turn>");
    ends += int32_t(id) == hf.token_to_id("<end_of_turn>");
  }
  EXPECT_EQ(starts, 2u);
  EXPECT_EQ(ends, 2u);
  std::vector<int32_t> ids(s.tokens().begin(), s.tokens().end());
  EXPECT_EQ(tok->decode(ids),
            "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>assistant\nhello<end_of_turn>\n");
}

}  // namespace
}  // namespace gemmax

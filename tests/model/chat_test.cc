// Conversations through a chat template (model/chat.h): a reply with the cache kept across
// turns equals the reply computed from the whole conversation again, the streamed text is
// the reply, and a reply ends at the template's end-of-turn token.
#include "gemmax/model/chat.h"

#include <gtest/gtest.h>

#include "gemmax/backend/reference/reference_backend.h"
#include "test_util.h"

namespace gemmax {
namespace {
using json = nlohmann::ordered_json;
using testing::random_weights;

constexpr const char* kChatMl = testing::kChatMlTemplate;

struct ChatFixture {
  ModelConfig cfg = testing::byte_config();
  ReferenceBackend be;
  Gemma4Model model{cfg, be, {DType::F64, RematPolicy::None, 1}};
  Tensor w = random_weights(model.params(), 11, DType::F64);
  std::unique_ptr<Tokenizer> tok = make_byte_tokenizer();
  ChatTemplate chat{ChatTemplateSource{kChatMl, "chatml"}};
};

TEST(Chat, TheCacheKeptAcrossTurnsGivesTheRepliesOfAFreshRender) {
  ChatFixture f;
  ChatOptions kept;
  kept.sample = {.max_new_tokens = 6, .temperature = 0};
  kept.max_length = 512;
  ChatOptions fresh = kept;
  fresh.reuse_cache = false;
  ChatSession a(f.model, f.w, *f.tok, f.chat, kept), b(f.model, f.w, *f.tok, f.chat, fresh);
  for (const char* turn : {"Hello there", "And again?", "Third"}) {
    std::string streamed;
    const ChatReply ra = a.say(turn, [&](std::string_view t) { streamed += t; });
    const ChatReply rb = b.say(turn);
    EXPECT_EQ(ra.ids, rb.ids) << turn;
    EXPECT_EQ(ra.text, rb.text) << turn;
    EXPECT_EQ(streamed, ra.text) << turn;
    EXPECT_EQ(rb.reused_tokens, 0);
    if (std::string(turn) != "Hello there") EXPECT_GT(ra.reused_tokens, 20) << turn;
  }
  EXPECT_EQ(a.example()["messages"].size(), 6u);
  EXPECT_EQ(a.example()["messages"][5]["role"], "assistant");
}

TEST(Chat, TheTemplatesEndOfTurnIsFound) {
  ChatFixture f;
  EXPECT_EQ(end_of_turn_text(f.chat), "<|im_end|>");
  const std::string gemma4 = testing::read_file(std::string(GEMMAX_SOURCE_DIR) +
                                                "/fuzz/corpus/chat_template_fuzz/gemma4.jinja");
  EXPECT_EQ(end_of_turn_text(ChatTemplate(ChatTemplateSource{gemma4, "gemma4"})), "<turn|>");
  // A byte tokenizer spells <|im_end|> in ten tokens: only eos ends the reply there.
  ChatSession s(f.model, f.w, *f.tok, f.chat, {});
  EXPECT_EQ(s.stop_ids(), std::vector<int32_t>{f.tok->eos_id()});
}

TEST(Chat, AConversationLongerThanTheCacheIsAClearError) {
  ChatFixture f;
  ChatOptions o;
  o.sample.max_new_tokens = 8;
  o.max_length = 40;
  ChatSession s(f.model, f.w, *f.tok, f.chat, o);
  testing::expect_error([&] { s.say(std::string(60, 'x')); },
                        {"more than the 40 positions", "--max_length"});
}

}  // namespace
}  // namespace gemmax

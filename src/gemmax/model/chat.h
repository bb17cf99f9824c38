// A conversation with a model through its own chat template. Each reply renders the whole
// conversation with add_generation_prompt, as transformers' apply_chat_template does, feeds
// the decoder only the tokens its KV cache does not already hold (the turns before are kept
// across replies), and samples until an end-of-turn id.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gemmax/data/chat_template.h"
#include "gemmax/data/tokenizer.h"
#include "gemmax/model/decode.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/sampler.h"

namespace gemmax {

struct ChatOptions {
  SampleOptions sample;       // per reply; stop_ids: generation_config.json's eos ids
  int64_t max_length = 4096;  // positions the KV cache holds: the whole conversation
  bool reuse_cache = true;    // false: every reply prefills the conversation again (checks)
  BoundAdapters lora;         // LoRA adapters on the weights (--adapter)
};

struct ChatReply {
  std::string text;               // the reply, decoded (without its end-of-turn token)
  std::vector<int32_t> ids;       // sampled; ends with the stop id if ended_turn
  bool ended_turn = false;        // stopped at an end-of-turn id, not at max_new_tokens
  int64_t prompt_tokens = 0;      // the rendered conversation
  int64_t reused_tokens = 0;      // of those, already in the KV cache
  double prefill_seconds = 0, decode_seconds = 0;
};

class ChatSession {
 public:
  // `example` is a JSONL line's object as training reads it (its "messages", "tools", ...);
  // the replies are appended to its messages. All references must outlive the session.
  ChatSession(const Gemma4Model& model, const Tensor& weights, const Tokenizer& tokenizer,
              const ChatTemplate& chat, ChatOptions options,
              nlohmann::ordered_json example = nlohmann::ordered_json::object());

  // A new conversation (the object as the constructor takes it), on the same decoder and
  // weights; what its render shares with the cache's (a system turn, tools) is kept.
  void start(nlohmann::ordered_json example);

  // Adds a user turn and replies to it.
  ChatReply say(const std::string& user_text,
                const std::function<void(std::string_view)>& on_text = {});
  // Replies to the conversation as it stands (its last turn the user's or a tool's); `on_text`
  // receives the reply's text as it is decoded.
  ChatReply reply(const std::function<void(std::string_view)>& on_text = {});

  const nlohmann::ordered_json& example() const { return example_; }
  // The ids that end a reply: the stop ids, the tokenizer's eos, and the template's end of turn.
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

 private:
  const Gemma4Model& model_;
  const Tokenizer& tokenizer_;
  const ChatTemplate& chat_;
  ChatOptions options_;
  nlohmann::ordered_json example_;
  std::vector<int32_t> stop_ids_;
  Decoder decoder_;
  std::vector<int32_t> cached_;  // the ids whose keys and values the decoder holds, in order
};

// The text the template writes right after an assistant turn's content (Gemma's "<turn|>",
// ChatML's "<|im_end|>"), up to the first whitespace; "" if it writes none.
std::string end_of_turn_text(const ChatTemplate& chat);

}  // namespace gemmax

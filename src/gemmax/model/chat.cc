#include "gemmax/model/chat.h"

#include <algorithm>

#include "gemmax/base/error.h"
#include "gemmax/base/timer.h"

namespace gemmax {
namespace {

using json = nlohmann::ordered_json;

// The length of the text that can be shown while more tokens may follow: not an incomplete last
// UTF-8 character (a byte-fallback token's first bytes, where the tokenizer gives raw bytes),
// nor trailing U+FFFD (where it gives one per byte of an incomplete character, which the next
// tokens may turn into that character).
size_t settled_prefix(std::string_view s) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  while (s.ends_with(kReplacement)) s.remove_suffix(kReplacement.size());
  size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xc0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (need > back) n = s.size() - back;
    break;
  }
  return n;
}

}  // namespace

std::string end_of_turn_text(const ChatTemplate& chat) {
  constexpr std::string_view kMark = "\x01gemmax-reply\x01";
  const json example = {{"messages",
                         {{{"role", "user"}, {"content", "Hi"}},
                          {{"role", "assistant"}, {"content", std::string(kMark)}}}}};
  std::string text;
  try {
    text = chat.render_text(chat.conversation(example), false);
  } catch (const Error&) {
    return "";  // a template that refuses this shape names no end of turn
  }
  const size_t at = text.find(kMark);
  if (at == std::string::npos) return "";
  const std::string after = text.substr(at + kMark.size());
  const size_t end = after.find_first_of(" \t\r\n");
  return after.substr(0, end);
}

ChatSession::ChatSession(const Gemma4Model& model, const Tensor& weights,
                         const Tokenizer& tokenizer, const ChatTemplate& chat, ChatOptions options,
                         json example)
    : model_(model),
      tokenizer_(tokenizer),
      chat_(chat),
      options_(std::move(options)),
      decoder_(model, weights, {options_.max_length, /*prefill_chunk=*/0, options_.lora}) {
  check_sample_options(options_.sample);
  if (tokenizer.vocab_size() > model.config().vocab_size)
    fail("tokenizer ", tokenizer.describe(), " has a larger vocabulary than the model (",
         model.config().vocab_size, " tokens); use the tokenizer the model was trained with");
  start(std::move(example));
  stop_ids_ = options_.sample.stop_ids;
  if (tokenizer.eos_id() >= 0) stop_ids_.push_back(tokenizer.eos_id());
  // The end-of-turn text is one token in the model's vocabulary (Gemma's <turn|>): it ends the
  // reply whether or not generation_config.json lists it.
  if (const std::string eot = end_of_turn_text(chat); !eot.empty()) {
    std::vector<int32_t> ids;
    encode_rendered(tokenizer, chat, eot, ids);
    if (ids.size() == 1) stop_ids_.push_back(ids[0]);
  }
  std::ranges::sort(stop_ids_);
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
}

void ChatSession::start(json example) {
  if (!example.is_object()) fail("chat: the conversation must be a JSON object with \"messages\"");
  if (!example.contains("messages")) example["messages"] = json::array();
  if (!example["messages"].is_array())
    fail("chat: \"messages\" must be a list of turns, got ", example["messages"].dump());
  example_ = std::move(example);
}

ChatReply ChatSession::say(const std::string& user_text,
                           const std::function<void(std::string_view)>& on_text) {
  example_["messages"].push_back({{"role", "user"}, {"content", user_text}});
  return reply(on_text);
}

ChatReply ChatSession::reply(const std::function<void(std::string_view)>& on_text) {
  const std::string prompt = chat_.render_text(chat_.conversation(example_), true);
  std::vector<int32_t> ids;
  encode_rendered(tokenizer_, chat_, prompt, ids);
  if (ids.empty()) fail("chat: the template renders the conversation as no tokens");
  const int64_t budget = int64_t(ids.size()) + options_.sample.max_new_tokens;
  if (budget > options_.max_length)
    fail("chat: the conversation is ", ids.size(), " tokens and a reply may add ",
         options_.sample.max_new_tokens, ", more than the ", options_.max_length,
         " positions the KV cache holds; raise --max_length or start a new conversation");

  // What the cache already holds: the longest common prefix of its ids and the new ones, at
  // least one token short of them (the last one's logits are needed).
  ChatReply r;
  r.prompt_tokens = int64_t(ids.size());
  size_t keep = 0;
  if (options_.reuse_cache) {
    while (keep < cached_.size() && keep + 1 < ids.size() && cached_[keep] == ids[keep]) ++keep;
    if (!decoder_.truncate(int64_t(keep))) keep = 0;
  }
  if (keep == 0) decoder_.reset();
  cached_.resize(keep);
  r.reused_tokens = int64_t(keep);

  Timer timer;
  const std::span<const int32_t> fresh(ids.data() + keep, ids.size() - keep);
  Tensor logits = decoder_.prefill(fresh);
  cached_.insert(cached_.end(), fresh.begin(), fresh.end());
  r.prefill_seconds = timer.seconds();
  timer.reset();

  Sampler sampler(options_.sample);
  std::string shown;  // what on_text has received
  // The reply's text so far, without the stop id (a tokenizer may spell it: "<turn|>"), from
  // where the shown text ends; nothing while the text no longer extends it (a character
  // completed over what was shown of it), until it does again.
  auto show = [&](bool all) {
    if (!on_text) return;
    const std::span<const int32_t> content(r.ids.data(), r.ids.size() - (r.ended_turn ? 1 : 0));
    const std::string text = tokenizer_.decode(content);
    const size_t ready = all ? text.size() : settled_prefix(text);
    if (ready <= shown.size() || text.compare(0, shown.size(), shown) != 0) return;
    on_text(std::string_view(text).substr(shown.size(), ready - shown.size()));
    shown = text.substr(0, ready);
  };
  for (;;) {
    const int32_t next = sampler.sample(logits);
    r.ids.push_back(next);
    if (std::ranges::binary_search(stop_ids_, next)) {
      r.ended_turn = true;
      break;
    }
    show(false);
    if (int64_t(r.ids.size()) >= options_.sample.max_new_tokens) break;
    logits = decoder_.step(next);
    cached_.push_back(next);
  }
  show(true);
  r.decode_seconds = timer.seconds();
  std::vector<int32_t> content = r.ids;
  if (r.ended_turn) content.pop_back();
  r.text = tokenizer_.decode(content);
  example_["messages"].push_back({{"role", "assistant"}, {"content", r.text}});
  return r;
}

}  // namespace gemmax

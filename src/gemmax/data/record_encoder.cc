#include "gemmax/data/record_encoder.h"

#include "gemmax/base/error.h"

namespace gemmax {

RecordEncoder::RecordEncoder(const Tokenizer& tok, const ChatTemplate* chat, std::string text_key,
                             bool add_bos, bool chat_spans_by_prefix_renders)
    : tok_(tok),
      chat_(chat),
      text_key_(std::move(text_key)),
      add_bos_(add_bos),
      prefix_renders_(chat_spans_by_prefix_renders) {}

EncodedDocument RecordEncoder::encode_text(std::string_view text) const {
  EncodedDocument d;
  d.add_bos = add_bos_;
  if (text.empty()) return d;
  d.kind = EncodedDocument::Kind::Text;
  d.ids = tok_.encode(text);
  return d;
}

EncodedDocument RecordEncoder::encode(const nlohmann::ordered_json& j,
                                      const std::string& where) const {
  if (j.is_object() && j.contains("messages")) return conversation(j, where);
  if (j.is_object() && (j.contains("prompt") || j.contains("completion"))) return pair(j, where);
  if (!j.is_object() || !j.contains(text_key_))
    fail(where, ": expected a JSON object with a \"", text_key_,
         "\" field (set another field with --text_key, or train_data_columns)");
  if (!j[text_key_].is_string())
    fail(where, ": field \"", text_key_, "\" is ", j[text_key_].type_name(),
         ", expected a string");
  return encode_text(j[text_key_].get_ref<const std::string&>());
}

// TRL's prompt-completion form: one document, the prompt's tokens then the completion's, the
// completion alone counted by the loss mask (sft_train_on_completion_only).
EncodedDocument RecordEncoder::pair(const nlohmann::ordered_json& j,
                                    const std::string& where) const {
  for (const char* key : {"prompt", "completion"}) {
    if (!j.contains(key))
      fail(where, ": a prompt-completion pair needs both \"prompt\" and \"completion\"; \"", key,
           "\" is missing");
    if (!j[key].is_string())
      fail(where, ": field \"", key, "\" is ", j[key].type_name(), ", expected a string");
  }
  EncodedDocument d;
  d.kind = EncodedDocument::Kind::Pair;
  d.add_bos = add_bos_;
  d.ids = tok_.encode(j["prompt"].get_ref<const std::string&>());
  const std::vector<int32_t> completion = tok_.encode(j["completion"].get_ref<const std::string&>());
  if (completion.empty())
    fail(where,
         ": the completion is empty after tokenization: nothing to learn from this pair; drop it "
         "or give it a completion");
  d.mask.assign(d.ids.size(), 0);
  d.ids.insert(d.ids.end(), completion.begin(), completion.end());
  d.mask.resize(d.ids.size(), 1);
  return d;
}

// A conversation rendered by the chat template: one document, the assistant turns counted.
// The template writes bos itself (or not); an eos it writes at the very end is the document's.
EncodedDocument RecordEncoder::conversation(const nlohmann::ordered_json& j,
                                            const std::string& where) const {
  if (!chat_)
    fail(where,
         ": a \"messages\" conversation needs a chat template: give --chat_template_dir HF_DIR "
         "(its chat_template.jinja or tokenizer_config.json), --chat_template_path FILE or "
         "--chat_template TEXT (training: chat_template_path, or tokenizer_path's folder)");
  RenderedChat rendered;
  try {
    const Conversation c = chat_->conversation(j);
    rendered = chat_->render(c, prefix_renders_ ? SpanSearch::kPrefixRenders : SpanSearch::kOneRender);
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  // An empty answer ("", blanks, null, []) is kept as transformers renders it: its counted
  // tokens are the turn's closing text.
  if (rendered.assistant_spans.empty())
    fail(where,
         ": the conversation has no assistant turn: nothing for the loss to count; drop it or add "
         "the answer");
  EncodedDocument d;
  d.kind = EncodedDocument::Kind::Conversation;
  std::vector<int32_t>& ids = d.ids;
  std::vector<uint8_t>& mask = d.mask;
  size_t pos = 0;
  auto piece = [&](size_t end, uint8_t counted, size_t turn) {
    const size_t before = ids.size();
    encode_rendered(tok_, *chat_, std::string_view(rendered.text).substr(pos, end - pos), ids);
    if (counted && ids.size() == before)
      fail(where, ": assistant turn ", turn + 1,
           " is empty after tokenization: nothing to learn from it; drop it or give it content");
    mask.resize(ids.size(), counted);
    pos = end;
  };
  for (size_t k = 0; k < rendered.assistant_spans.size(); ++k) {
    piece(rendered.assistant_spans[k].first, 0, k);
    piece(rendered.assistant_spans[k].second, 1, k);
  }
  piece(rendered.text.size(), 0, 0);
  d.add_bos = !ids.empty() && tok_.bos_id() >= 0 && ids.front() == tok_.bos_id();
  if (d.add_bos) {
    ids.erase(ids.begin());
    mask.erase(mask.begin());
  }
  if (!ids.empty() && ids.back() == tok_.eos_id()) {
    ids.pop_back();
    mask.pop_back();
  }
  for (size_t k = 0; k < ids.size(); ++k)
    if (ids[k] == tok_.eos_id())
      fail(where, ": the chat template writes the eos token (\"", chat_->eos_token(),
           "\") inside the conversation, at token ", k,
           "; a token shard separates documents by eos, so a document may not contain it");
  return d;
}

}  // namespace gemmax

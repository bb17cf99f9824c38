// One record -> one document of token ids and its loss mask: a JSONL line of `gemmax tokenize`
// or a row of a Hugging Face dataset (dataset_type=hf), encoded the same way.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gemmax/data/chat_template.h"
#include "gemmax/data/tokenizer.h"

namespace gemmax {

struct EncodedDocument {
  enum class Kind { Empty, Text, Pair, Conversation } kind = Kind::Empty;
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // one 0/1 per id, or empty: every token counts
  bool add_bos = true;        // the writer prepends bos (a conversation's template decides)
};

class RecordEncoder {
 public:
  // `chat`: the template of `messages` records (null: such a record is an error naming the
  // options). `text_key`: the field of a text record. Both must outlive the encoder.
  RecordEncoder(const Tokenizer& tok, const ChatTemplate* chat, std::string text_key, bool add_bos,
                bool chat_spans_by_prefix_renders);

  // A JSON object: {"messages": [...]} is a conversation rendered by the chat template, its
  // assistant turns counted by the mask; {"prompt", "completion"} a pair, the completion
  // counted; else {text_key: "..."} a document counted whole. Errors start with `where`
  // ("file:line", "file: row N").
  EncodedDocument encode(const nlohmann::ordered_json& record, const std::string& where) const;
  // Plain text, one document.
  EncodedDocument encode_text(std::string_view text) const;

  const std::string& text_key() const { return text_key_; }

 private:
  EncodedDocument pair(const nlohmann::ordered_json& record, const std::string& where) const;
  EncodedDocument conversation(const nlohmann::ordered_json& record,
                               const std::string& where) const;
  const Tokenizer& tok_;
  const ChatTemplate* chat_;
  std::string text_key_;
  bool add_bos_, prefix_renders_;
};

}  // namespace gemmax

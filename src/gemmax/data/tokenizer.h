// Tokenizers: text <-> token ids. Byte-level (the tiny model's vocabulary), SentencePiece
// (a tokenizer.model) and Hugging Face's tokenizer.json (what Gemma-4 releases ship).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gemmax {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Plain ids of the text: no bos/eos added (documents are framed by the caller).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Special ids (pad/bos/eos) decode to nothing; ids outside the vocabulary to U+FFFD.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1: the tokenizer has none
  virtual int32_t eos_id() const = 0;
  virtual int32_t pad_id() const = 0;        // -1: the tokenizer has none
  virtual std::string describe() const = 0;  // e.g. "byte (vocab 259)"
};

// Byte-level: pad 0, eos 1, bos 2, byte b -> b + 3; vocabulary 259.
inline constexpr int32_t kByteTokenizerOffset = 3;
inline constexpr int64_t kByteVocabSize = 256 + kByteTokenizerOffset;
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// Loads a SentencePiece `.model` file; ids (pad/bos/eos) are the model's own.
std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path);

// Loads a Hugging Face tokenizer.json; special ids from tokenizer_config.json (or
// special_tokens_map.json) beside it, bos else from its post-processor.
std::unique_ptr<Tokenizer> make_huggingface_tokenizer(const std::string& json_path);

// The tokenizer at `path`, its kind read from the file: a model folder (its tokenizer.json,
// else its tokenizer.model, as transformers looks), a tokenizer.json or a SentencePiece .model
// file; no path: byte. type: "auto" (or empty) takes the file's kind; "byte", "sentencepiece"
// and "huggingface" (MaxText's names) must agree with it.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type, const std::string& path);

// The kind make_tokenizer(type, path) makes: "byte", "sentencepiece" or "huggingface" (auto
// resolved from the file), without loading it; a resumed run compares runs by it.
std::string tokenizer_kind(const std::string& type, const std::string& path);

// The file make_tokenizer would read for `path` ("" for byte), for callers that list inputs.
std::string tokenizer_file(const std::string& path);

}  // namespace gemmax

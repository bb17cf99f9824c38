// Hugging Face `tokenizer.json`: the pieces of the `tokenizers` library's pipeline that the Gemma
// family and transformers' SentencePiece conversions use, each with the library's semantics.
// encode: added tokens -> normalizer -> added tokens (normalized) -> pre-tokenizer -> BPE.
// decode: ids -> token strings -> decoder chain -> joined text.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gemmax/data/hf_regex.h"
#include "gemmax/data/tokenizer.h"

namespace gemmax::hf {

// Where a component was read from, for error messages: the file and the JSON path.
struct Where {
  std::string file;
  std::string field;  // e.g. "normalizer.normalizers[1]"
  Where at(std::string_view sub) const {
    return {file, field.empty() ? std::string(sub) : field + "." + std::string(sub)};
  }
  Where index(size_t i) const { return {file, field + "[" + std::to_string(i) + "]"}; }
};
[[noreturn]] void fail_at(const Where& w, std::string_view problem);
// A component's fields: required, or with the library's default when absent or null.
const nlohmann::json& field(const nlohmann::json& j, const char* key, const Where& w);
std::string string_field(const nlohmann::json& j, const char* key, const Where& w);
bool bool_field(const nlohmann::json& j, const char* key, bool fallback, const Where& w);

// A span of text on its way through the pipeline. id >= 0: already an added token.
struct Piece {
  std::string text;
  int32_t id = -1;
  bool at_origin = false;  // starts at byte 0 of the original text (Metaspace prepend_scheme first)
};

// A pattern of Replace and Split: a literal string, or a regex.
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;
  static Pattern parse(const nlohmann::json& j, const Where& w);
  // Non-overlapping matches, left to right, as the library finds them (onig's find_iter).
  void find(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};
std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& j, const Where& w);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits one piece (no id) into `out`, dropping empty ones.
  virtual void split(Piece&& piece, std::vector<Piece>& out) const = 0;
};
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& j, const Where& w);

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};
std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& j, const Where& w);

// Transparent hashing: vocabulary lookups by string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// The BPE model: vocabulary, ranked merges, byte fallback and unknown-token handling.
class Bpe {
 public:
  Bpe(const nlohmann::json& model, const Where& w);
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;
  const Vocab& vocab() const { return vocab_; }
  int32_t find(std::string_view token) const {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }

 private:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };
  // Open addressing keyed by the pair (a << 32 | b): the hot lookup of every merge step.
  struct MergeTable {
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    std::vector<uint64_t> keys;
    std::vector<Merge> values;
    uint64_t mask = 0;
    int shift = 64;
    size_t size = 0;
    void reserve(size_t n);
    void put(uint64_t key, Merge m);  // a key put again takes the new value
    const Merge* get(uint64_t key) const {
      if (size == 0) return nullptr;
      for (uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> shift;; i = (i + 1) & mask) {
        if (keys[i] == key) return &values[i];
        if (keys[i] == kEmpty) return nullptr;
      }
    }
  };
  const Merge* merge_of(int32_t a, int32_t b) const {
    return merges_.get(uint64_t(uint32_t(a)) << 32 | uint32_t(b));
  }
  // The id of one character (no prefix or suffix), -1 if the vocabulary lacks it.
  int32_t char_id(std::string_view c) const;
  void merge_all(std::vector<int32_t>& symbols) const;

  Vocab vocab_;
  MergeTable merges_;
  std::vector<int32_t> ascii_ids_;                  // one-byte characters, by byte
  std::unordered_map<uint32_t, int32_t> char_ids_;  // longer characters, by their UTF-8 bytes
  std::string unk_token_, prefix_, suffix_;
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  int32_t byte_ids_[256];  // <0xXX> ids; -1 where the vocabulary lacks one
};

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, normalized = true, lstrip = false, rstrip = false, single_word = false;
};

// Leftmost-longest matching of added tokens in text, with their strip and word flags.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // patterns[i] is matched for tokens[i] (normalized tokens match their normalized content).
  AddedTokenMatcher(std::vector<const AddedToken*> tokens, std::vector<std::string> patterns);
  bool empty() const { return tokens_.empty(); }
  // Splits `piece` at the tokens found in it; pieces keep at_origin only at offset 0.
  void split(Piece&& piece, std::vector<Piece>& out) const;

 private:
  // Byte trie: node -> (byte -> child); terminal[node] = token index or -1.
  struct Node {
    int32_t token = -1;
    std::vector<std::pair<uint8_t, int32_t>> next;
  };
  std::vector<Node> nodes_;
  std::vector<const AddedToken*> tokens_;
  bool first_byte_[256] = {};
};

// Special tokens of TemplateProcessing's single-sequence template, before and after the text.
struct Template {
  std::vector<int32_t> before, after;
  bool present = false;
};

class HfTokenizer final : public Tokenizer {
 public:
  // path: the tokenizer.json file; tokenizer_config.json and special_tokens_map.json are looked
  // for beside it.
  explicit HfTokenizer(const std::string& path);
  std::vector<int32_t> encode(std::string_view text) const override;
  // The library's encode with add_special_tokens=True: the post-processor's bos (and any other
  // template tokens) around the text.
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  int32_t pad_id() const override { return pad_; }
  std::string describe() const override;
  // The id of a token string (vocabulary or added), -1 if none.
  int32_t token_to_id(std::string_view token) const;

 private:
  void read_special_ids();

  std::string path_;
  std::unique_ptr<Bpe> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::vector<std::string> id_to_token_;  // the model's and the added tokens'
  Template template_;
  int64_t vocab_size_ = 0;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1;
};

// Fails naming `what` and the byte offset unless text is valid UTF-8.
void check_utf8(std::string_view text, std::string_view what);

}  // namespace gemmax::hf

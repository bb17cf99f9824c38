// Hugging Face tokenizer.json: any file through the loader, any text through encode and any ids
// through decode of what loads. Every id encode gives must be in the vocabulary.
#include <cstring>

#include "fuzz_util.h"
#include "gemmax/base/error.h"
#include "gemmax/data/tokenizer.h"

namespace {

// A small Gemma-style pipeline with every supported component, for inputs that hold text only.
constexpr std::string_view kDefault = R"({
 "added_tokens": [{"id": 0, "content": "<pad>", "special": true, "normalized": false},
  {"id": 1, "content": "<eos>", "special": true, "normalized": false},
  {"id": 2, "content": "<bos>", "special": true, "normalized": false},
  {"id": 3, "content": "<|turn>", "special": true, "normalized": false, "lstrip": true, "rstrip": true},
  {"id": 4, "content": "ab", "single_word": true}],
 "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Prepend", "prepend": "▁"},
  {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
  {"type": "Split", "pattern": {"Regex": "\\p{N}|▁?\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": false},
  {"type": "Split", "pattern": {"String": "b"}, "behavior": "MergedWithNext", "invert": true},
  {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}]},
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
  {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}},
 "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
  {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
 "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
  "vocab": {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<|turn>": 3, "ab": 4, "<unk>": 5, "a": 6, "b": 7,
   "▁": 8, "▁a": 9, "▁ab": 10, "<0x41>": 11, "<0xE2>": 12, "<0x96>": 13, "<0x81>": 14},
  "merges": ["▁ a", ["a", "b"], "▁a b"]}
})";

std::unique_ptr<gemmax::Tokenizer> g_default;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_default = gemmax::make_huggingface_tokenizer(
      gemmax::fuzz::write_scratch("default/tokenizer.json", kDefault));
  return 0;
}

// Input: text only (the default tokenizer), or a tokenizer.json, a line "--text--", the text.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts =
      gemmax::fuzz::split_input(gemmax::fuzz::as_view(data, size), "\n--text--\n", 2);
  try {
    std::unique_ptr<gemmax::Tokenizer> own;
    if (parts.size() == 2)
      own = gemmax::make_huggingface_tokenizer(
          gemmax::fuzz::write_scratch("in/tokenizer.json", parts[0]));
    const gemmax::Tokenizer& tok = own ? *own : *g_default;
    const std::string_view text = parts.back();
    const std::vector<int32_t> ids = tok.encode(text);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    (void)tok.decode(ids);
    std::vector<int32_t> raw(text.size() / sizeof(int32_t));
    if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * sizeof(int32_t));
    (void)tok.decode(raw);
  } catch (const gemmax::Error&) {
  }
  return 0;
}

#include "gemmax/base/error.h"
#include "gemmax/data/tokenizer.h"

namespace gemmax {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i)
      ids[i] = int32_t(uint8_t(text[i])) + kByteTokenizerOffset;
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= kByteTokenizerOffset && id < kByteVocabSize)
        out += char(uint8_t(id - kByteTokenizerOffset));
      else if (id < 0 || id >= kByteVocabSize)
        out += "\xEF\xBF\xBD";  // U+FFFD
    }
    return out;
  }
  int64_t vocab_size() const override { return kByteVocabSize; }
  int32_t bos_id() const override { return 2; }
  int32_t eos_id() const override { return 1; }
  int32_t pad_id() const override { return 0; }
  std::string describe() const override { return str_cat("byte (vocab ", kByteVocabSize, ")"); }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace gemmax

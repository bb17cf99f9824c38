#include <sentencepiece_processor.h>

#include <filesystem>

#include "gemmax/base/error.h"
#include "gemmax/data/tokenizer.h"

namespace gemmax {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    std::error_code ec;
    if (path.empty())
      fail(
          "tokenizer_type sentencepiece needs tokenizer_path: the SentencePiece .model file "
          "(for Gemma: the model's tokenizer.model)");
    if (!std::filesystem::exists(path, ec))
      fail("tokenizer_path '", path, "': no such file (expected a SentencePiece .model file)");
    if (std::filesystem::is_directory(path, ec))
      fail("tokenizer_path '", path,
           "' is a folder; give the SentencePiece .model file in it "
           "(for Gemma: tokenizer.model)");
    const auto status = sp_.Load(path);
    if (!status.ok())
      fail("tokenizer_path '", path, "' is not a SentencePiece model (", status.ToString(),
           "); give a .model file such as Gemma's tokenizer.model, not tokenizer.json");
    if (sp_.GetPieceSize() <= 0)
      fail("tokenizer_path '", path, "': the SentencePiece model is empty");
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) fail("SentencePiece '", path_, "': cannot encode text: ", status.ToString());
    return {ids.begin(), ids.end()};
  }

  std::string decode(std::span<const int32_t> ids) const override {
    // SentencePiece rejects out-of-range ids; decode each valid run and mark the others.
    std::string out, part;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      const auto status = sp_.Decode(run, &part);
      if (!status.ok()) fail("SentencePiece '", path_, "': cannot decode ids: ", status.ToString());
      out += part;
      run.clear();
    };
    for (int32_t id : ids) {
      if (id >= 0 && id < sp_.GetPieceSize()) {
        run.push_back(id);
      } else {
        flush();
        out += "\xEF\xBF\xBD";
      }
    }
    flush();
    return out;
  }

  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  int32_t bos_id() const override { return sp_.bos_id(); }
  int32_t eos_id() const override { return sp_.eos_id(); }
  int32_t pad_id() const override { return sp_.pad_id(); }
  std::string describe() const override {
    return str_cat("sentencepiece '", path_, "' (vocab ", vocab_size(), ")");
  }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

}  // namespace gemmax

// One way to make a tokenizer: the kind comes from the file; a named type is checked against it.
#include <filesystem>
#include <fstream>

#include "gemmax/base/error.h"
#include "gemmax/data/hf_tokenizer.h"
#include "gemmax/data/tokenizer.h"

namespace gemmax {
namespace {

namespace fs = std::filesystem;

// A tokenizer.json is a JSON object; a SentencePiece model is a binary protobuf.
bool looks_like_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c))
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return c == '{';
  return false;
}

}  // namespace

std::unique_ptr<Tokenizer> make_huggingface_tokenizer(const std::string& json_path) {
  return std::make_unique<hf::HfTokenizer>(json_path);
}

std::string tokenizer_file(const std::string& path) {
  if (path.empty()) return "";
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::is_regular_file(fs::path(path) / name, ec)) return (fs::path(path) / name).string();
  fail("tokenizer_path '", path,
       "' is a folder without tokenizer.json or tokenizer.model; give the model folder as "
       "downloaded (Gemma-4 ships tokenizer.json), or the tokenizer file itself");
}

std::string tokenizer_kind(const std::string& type, const std::string& path) {
  if (!type.empty() && type != "auto") return type;
  if (path.empty()) return "byte";
  return looks_like_json(tokenizer_file(path)) ? "huggingface" : "sentencepiece";
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type, const std::string& path) {
  if (type != "auto" && type != "" && type != "byte" && type != "sentencepiece" &&
      type != "huggingface")
    fail("tokenizer_type '", type,
         "' is unknown: expected auto (the kind tokenizer_path holds), byte, sentencepiece or "
         "huggingface");
  if (path.empty()) {
    if (type == "sentencepiece" || type == "huggingface")
      fail("tokenizer_type ", type,
           " needs tokenizer_path: a model folder, its tokenizer.json or tokenizer.model");
    return make_byte_tokenizer();
  }
  if (type == "byte")
    fail("tokenizer_path '", path,
         "' is set but tokenizer_type is byte, which needs no file; clear tokenizer_path, or "
         "set tokenizer_type=auto to use the file");
  std::error_code ec;
  if (!fs::exists(path, ec))
    fail("tokenizer_path '", path,
         "': no such file or folder (expected a model folder, a tokenizer.json or a "
         "SentencePiece .model file)");
  const std::string file = tokenizer_file(path);
  const bool json = looks_like_json(file);
  const char* kind = json ? "huggingface" : "sentencepiece";
  if (!type.empty() && type != "auto" && type != kind)
    fail("tokenizer_type=", type, " but tokenizer_path '", file, "' is a ",
         json ? "Hugging Face tokenizer.json" : "SentencePiece model (not JSON)",
         "; set tokenizer_type=", kind, " or auto, or point tokenizer_path at a ",
         type == "huggingface" ? "tokenizer.json" : ".model file");
  if (json) return make_huggingface_tokenizer(file);
  return make_sentencepiece_tokenizer(file);
}

}  // namespace gemmax

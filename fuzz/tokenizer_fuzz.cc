// The tokenizers' input: any text through encode, any ids through decode, for the byte
// tokenizer (whose round trip must be exact) and a SentencePiece model trained at start-up on
// the built-in corpus.
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>

#include "fuzz_util.h"
#include "gemmax/base/error.h"
#include "gemmax/data/builtin_corpus.h"
#include "gemmax/data/tokenizer.h"

namespace {

std::unique_ptr<gemmax::Tokenizer> g_byte, g_spm;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace gemmax;
  g_byte = make_byte_tokenizer();
  std::string text;
  for (const std::string& doc : builtin_corpus(0)) {
    text += doc;
    text += '\n';
    if (text.size() > (1 << 17)) break;
  }
  const std::string corpus = fuzz::write_scratch("spm_corpus.txt", text);
  const std::string prefix = (fuzz::scratch_dir() / "spm").string();
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + corpus + " --model_prefix=" + prefix +
      " --vocab_size=800 --model_type=bpe --byte_fallback=true --minloglevel=2"
      " --pad_id=0 --eos_id=1 --bos_id=2 --unk_id=3");
  if (!status.ok()) {
    std::fprintf(stderr, "training the SentencePiece model failed: %s\n",
                 status.ToString().c_str());
    std::abort();
  }
  g_spm = make_sentencepiece_tokenizer(prefix + ".model");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = gemmax::fuzz::as_view(data, size);
  std::vector<int32_t> ids(size / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int32_t));
  try {
    const std::vector<int32_t> enc = g_byte->encode(text);
    if (g_byte->decode(enc) != text) std::abort();  // byte-level encoding is lossless
    (void)g_byte->decode(ids);
    for (int32_t id : g_spm->encode(text))
      if (id < 0 || id >= g_spm->vocab_size()) std::abort();
    (void)g_spm->decode(ids);
  } catch (const gemmax::Error&) {
  }
  return 0;
}

// gemmax tokenize: text files -> one token shard for dataset_type=shards.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "gemmax/base/error.h"
#include "gemmax/data/tokenize_files.h"

namespace gemmax {
namespace {

const char* kUsage =
    "usage: gemmax tokenize --out FILE.bin [options] INPUT...\n"
    "\n"
    "Tokenizes text into a token shard (format: docs/DATA.md) for dataset_type=shards.\n"
    "Each document is written as [bos] tokens eos.\n"
    "\n"
    "Inputs:\n"
    "  *.jsonl          one JSON object per line; its \"text\" field is a document\n"
    "  any other file   plain UTF-8 text: the whole file is one document (see --lines)\n"
    "Empty documents are skipped.\n"
    "\n"
    "Options:\n"
    "  --out FILE.bin             the shard to write (written to a temporary name, then renamed)\n"
    "  --tokenizer byte|sentencepiece\n"
    "                             default byte (vocab 259: pad 0, eos 1, bos 2, byte b -> b+3)\n"
    "  --tokenizer_path FILE      the SentencePiece .model file (Gemma: tokenizer.model)\n"
    "  --no-bos                   do not prepend bos to each document\n"
    "  --lines                    plain text: one document per non-empty line\n"
    "  --text_key KEY             *.jsonl: the field holding the text (default \"text\")\n"
    "  --help                     this text\n"
    "\n"
    "Example:\n"
    "  gemmax tokenize --out data/train.bin --tokenizer sentencepiece \\\n"
    "      --tokenizer_path tokenizer.model corpus.jsonl\n"
    "  gemmax train dataset_type=shards dataset_path=data/train.bin tokenizer_type=sentencepiece "
    "\\\n"
    "      tokenizer_path=tokenizer.model\n";

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  TokenizeOptions o;
  try {
    for (int i = 0; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
      }
      if (arg.rfind("--", 0) != 0 || arg == "--") {
        o.inputs.push_back(arg);
        continue;
      }
      // --key value or --key=value
      std::string key = arg, value;
      bool has_value = false;
      if (auto eq = arg.find('='); eq != std::string::npos) {
        key = arg.substr(0, eq), value = arg.substr(eq + 1), has_value = true;
      }
      auto take = [&]() -> std::string {
        if (has_value) return value;
        if (i + 1 >= argc) fail("tokenize: ", key, " needs a value (see gemmax tokenize --help)");
        return argv[++i];
      };
      if (key == "--no-bos" || key == "--lines") {
        if (has_value) fail("tokenize: ", key, " takes no value");
        if (key == "--no-bos")
          o.add_bos = false;
        else
          o.lines = true;
      } else if (key == "--out") {
        o.out = take();
      } else if (key == "--tokenizer" || key == "--tokenizer_type") {
        o.tokenizer_type = take();
      } else if (key == "--tokenizer_path") {
        o.tokenizer_path = take();
      } else if (key == "--text_key") {
        o.text_key = take();
      } else {
        fail("tokenize: unknown option '", key, "' (see gemmax tokenize --help)");
      }
    }
    if (o.out.empty()) fail("tokenize: --out FILE.bin is required (see gemmax tokenize --help)");
    if (o.inputs.empty())
      fail("tokenize: give at least one input file (see gemmax tokenize --help)");
    const TokenizeResult r = tokenize_files(o);
    std::printf("wrote %s: %llu document%s, %llu tokens, tokenizer %s\n", o.out.c_str(),
                (unsigned long long)r.documents, r.documents == 1 ? "" : "s",
                (unsigned long long)r.tokens, r.tokenizer.c_str());
    if (r.skipped_empty)
      std::printf("skipped %llu empty documents\n", (unsigned long long)r.skipped_empty);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace gemmax

// Text files -> one token shard: the work behind `gemmax tokenize`, kept in the library so
// that tests and other tools can call it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gemmax {

struct TokenizeOptions {
  // *.jsonl: one JSON object per line, {"text": ...} or {"prompt": ..., "completion": ...}; else
  // plain text. Prompt-completion pairs make a version-2 shard whose loss mask counts the
  // completions (docs/DATA.md).
  std::vector<std::string> inputs;
  std::string out;                  // the shard to write
  std::string tokenizer_type = "byte";
  std::string tokenizer_path;
  bool add_bos = true;            // documents are written as [bos] tokens eos
  bool lines = false;             // plain text: one document per non-empty line, not per file
  std::string text_key = "text";  // *.jsonl: the field holding the document's text
};

struct TokenizeResult {
  uint64_t documents = 0, tokens = 0;
  uint64_t skipped_empty = 0;  // documents with no text, not written
  uint64_t pairs = 0;          // prompt-completion documents (their completions masked in)
  std::string tokenizer;       // Tokenizer::describe()
};

TokenizeResult tokenize_files(const TokenizeOptions& options);

}  // namespace gemmax

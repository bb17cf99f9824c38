// Text files -> one token shard: the work behind `gemmax tokenize`, kept in the library so
// that tests and other tools can call it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gemmax {

struct TokenizeOptions {
  std::vector<std::string> inputs;  // *.jsonl: one JSON object per line; else plain text
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
  std::string tokenizer;       // Tokenizer::describe()
};

TokenizeResult tokenize_files(const TokenizeOptions& options);

}  // namespace gemmax

// Text files -> one token shard: the work behind `gemmax tokenize`, kept in the library so
// that tests and other tools can call it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gemmax {

struct TokenizeOptions {
  // *.jsonl: one JSON object per line, {"text": ...}, {"prompt": ..., "completion": ...} or
  // {"messages": [{"role": ..., "content": ...}, ...]}; *.parquet, *.arrow, *.json: rows of a
  // Hugging Face dataset (their `data_columns`); else plain text. Prompt-completion pairs and
  // conversations make a version-2 shard whose loss mask counts the completions and the
  // assistant turns (docs/DATA.md).
  std::vector<std::string> inputs;
  // A Hugging Face dataset on disk instead of `inputs` (MaxText's hf_path, hf_data_dir,
  // hf_train_files, train_split): its split's files (hf_dataset.h).
  std::string hf_path, hf_data_dir, hf_files, split = "train";
  // The columns a row is made of (MaxText's train_data_columns): one text column, "messages",
  // or "prompt" and "completion". Empty: [text_key] for dataset rows, and a JSONL line whole.
  std::vector<std::string> data_columns;
  std::string out;  // the shard to write
  std::string tokenizer_type = "auto";  // auto: the kind tokenizer_path holds (byte if none)
  std::string tokenizer_path;
  bool add_bos = true;            // documents are written as [bos] tokens eos
  bool lines = false;             // plain text: one document per non-empty line, not per file
  std::string text_key = "text";  // *.jsonl: the field holding the document's text
  // The chat template of `messages` lines: at most one of an HF model folder (its
  // chat_template.jinja or tokenizer_config.json), a template file, or the template's text.
  std::string chat_template_dir;
  std::string chat_template_path;
  std::string chat_template;
  // A render's bounds (a template is untrusted input) and how the assistant spans are found.
  int64_t chat_template_max_mib = 512;
  int64_t chat_template_max_steps = 20'000'000;
  bool chat_spans_by_prefix_renders = false;  // the plain way: 2 renders a turn
  // Documents encoded on this many threads (0: every core); the shard is the same for any.
  int64_t num_threads = 0;
};

struct TokenizeResult {
  uint64_t documents = 0, tokens = 0;
  uint64_t skipped_empty = 0;  // documents with no text, not written
  uint64_t pairs = 0;          // prompt-completion documents (their completions masked in)
  uint64_t conversations = 0;  // `messages` documents (their assistant turns masked in)
  std::string tokenizer;       // Tokenizer::describe()
  // A dataset's (hf_path / hf_files) rows: how many each data file holds, in reading order, and
  // the document each row became (-1: empty, not written). MaxText's HF order shuffles rows.
  std::vector<uint64_t> file_rows;
  std::vector<int64_t> row_document;
};

TokenizeResult tokenize_files(const TokenizeOptions& options);

}  // namespace gemmax

// Data loaders: the built-in corpus, token shards and synthetic data, all producing Batches.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "gemmax/data/batch.h"

namespace gemmax {

struct DataOptions {
  std::string dataset_type = "builtin";  // builtin | shards | hf | synthetic
  std::string dataset_path;              // shards: file, folder, or comma-separated list
  // hf: a Hugging Face dataset on disk (hf_dataset.h), tokenized as `gemmax tokenize` does;
  // data_columns comma-separated (train_data_columns). A `messages` column's chat template:
  // chat_template_path, chat_template, else that of tokenizer_path's folder, else model_dir's.
  std::string hf_path, hf_data_dir, hf_files, hf_split = "train", data_columns = "text";
  std::string chat_template_path, chat_template, model_dir;
  std::string tokenizer_type = "auto";  // auto | byte | sentencepiece | huggingface
  std::string tokenizer_path;
  bool packing = true;
  // How rows are filled (docs/DATA.md): "sequential" (documents in order, a piece that does not
  // fit the row starts the next) or "first_fit" (MaxText's grain: the global batch's rows open
  // together, each piece into the first with room).
  // (A run's defaults are MaxText's, first_fit and shuffled: keys.h. These are a library
  // caller's: documents in order.)
  std::string packing_type = "sequential";  // grain_packing_type
  bool shuffle = false;                     // enable_data_shuffling: grain's window shuffle
  int64_t shuffle_buffer = 100;             // grain_shuffle_buffer_size: the window, in documents
  int hf_datasets_version = 5;  // hf: whose streaming shuffle (datasets 4.x or 5.x) to follow
  bool truncate = false;  // use_truncation: keep a document's first seq tokens, drop the rest
  int64_t batch = 1;  // rows per batch (per_device_batch_size)
  // Data parallelism: the global batch has `ranks` x `batch` rows, and this loader returns rows
  // [rank x batch, (rank + 1) x batch) of it; the stream position (state()) is the global one.
  int64_t rank = 0, ranks = 1;
  int64_t seq = 0;         // max_target_length
  int64_t vocab_size = 0;  // the model's; every token must be below it
  uint64_t seed = 0;       // data_shuffle_seed (built-in corpus, shuffle, synthetic data)
  // sft_train_on_completion_only: only the tokens the shards' loss masks mark count as targets.
  bool completion_only = false;
  // The evaluation stream: the built-in corpus's held-out part (shards: dataset_path names the
  // eval shards), read in one pass from the start (no wrap; the last batch is padded). The data
  // must fill one global batch.
  bool eval = false;
};

class DataLoader {
 public:
  virtual ~DataLoader() = default;
  virtual Batch next() = 0;
  // Where the loader stands, so that a resumed run reads the same batches.
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;
  virtual std::string describe() const = 0;  // one line for the run log
  // An evaluation stream past its one pass: next() would return padding only.
  virtual bool exhausted() const { return false; }
};

// Throws gemmax::Error for a missing/short/corrupt shard, a token id outside the vocabulary, or
// data that cannot fill one row of `seq` tokens.
std::unique_ptr<DataLoader> make_data_loader(const DataOptions& options);

}  // namespace gemmax

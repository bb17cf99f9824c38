// Hugging Face datasets on disk (dataset_type=hf): the files of a split, found in a local folder as
// the `datasets` library finds them, and their rows as JSON objects of the columns asked for.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gemmax {

// MaxText's keys: hf_path, hf_data_dir, hf_train_files / hf_eval_files, train_split /
// hf_eval_split. `key_*` name the keys in errors.
struct HfSplitSpec {
  std::string path;      // the dataset's folder: a hub download, or datasets.save_to_disk's
  std::string data_dir;  // a folder inside it (load_dataset's data_dir)
  std::string files;     // explicit data files: comma-separated globs, relative to path
  std::string split;     // the split's name
  std::string key_files = "hf_train_files", key_split = "train_split";
};

// The split's data files, in the order they are read. A save_to_disk folder (state.json, or
// dataset_dict.json and a folder per split) gives its Arrow files; otherwise, as load_dataset on
// a local folder: `data/{split}-NNNNN-of-NNNNN*` files name their splits, else files and folders
// whose names hold a split's keyword (train/training, validation/valid/dev/val,
// test/testing/eval/evaluation) are that split's, else every file is "train". Only *.parquet,
// *.arrow, *.json and *.jsonl files are data. Throws, listing the splits there are, when the
// split has no file.
std::vector<std::string> hf_split_files(const HfSplitSpec& spec);

// The splits a folder holds, by the same rules (for messages and `gemmax info`).
std::vector<std::string> hf_splits(const std::string& path, const std::string& data_dir);

// Calls row(record, where) for each row of a data file (*.parquet, *.arrow, *.json, *.jsonl):
// `record` holds the columns named in `columns` (empty: every field of a JSON line). A column
// other than "messages" must be text; "messages" a list of turns. `where` names the row for
// errors: "file:line" (JSON) or "file: row N" (Parquet, Arrow).
// `read` (optional) is told the bytes of a JSON Lines file read so far, line by line.
void for_each_hf_row(
    const std::string& path, const std::vector<std::string>& columns,
    const std::function<void(const nlohmann::ordered_json&, const std::string&)>& row,
    const std::function<void(uint64_t)>& read = {});

// True for the files for_each_hf_row reads through Apache Arrow (Parquet, Arrow IPC).
bool is_arrow_data_file(const std::string& path);

}  // namespace gemmax

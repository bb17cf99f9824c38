#include "gemmax/data/hf_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "gemmax/base/error.h"
#include "gemmax/data/chat_template.h"
#include "gemmax/data/arrow_reader.h"

namespace gemmax {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::string extension(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(dot);
}

bool is_data_file(const std::string& path) {
  const std::string e = extension(path);
  return e == ".parquet" || e == ".arrow" || e == ".json" || e == ".jsonl";
}

Json read_json_file(const fs::path& p) {
  std::ifstream in(p);
  if (!in) fail("cannot read '", p.string(), "'");
  try {
    return Json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("'", p.string(), "' is not valid JSON (", e.what(), "): the dataset folder is damaged");
  }
}

// fsspec's glob as a regex over '/'-separated relative paths: "**/" any folders (or none), "**"
// anything, "*" and "?" within one name, [...] a character class.
std::regex glob_regex(const std::string& glob) {
  std::string re;
  for (size_t i = 0; i < glob.size(); ++i) {
    const char c = glob[i];
    if (c == '*' && i + 1 < glob.size() && glob[i + 1] == '*') {
      const bool slash = i + 2 < glob.size() && glob[i + 2] == '/';
      re += slash ? "(?:.*/)?" : ".*";
      i += slash ? 2 : 1;
    } else if (c == '*') {
      re += "[^/]*";
    } else if (c == '?') {
      re += "[^/]";
    } else if (c == '[') {
      const size_t end = glob.find(']', i + 1);
      if (end == std::string::npos) {
        re += "\\[";
        continue;
      }
      re += glob.substr(i, end - i + 1);
      i = end;
    } else {
      if (std::string_view("\\^$.|+(){}").find(c) != std::string_view::npos) re += '\\';
      re += c;
    }
  }
  return std::regex(re);
}

// The data files under `base`, relative to it and sorted; hidden files and folders (".", "__")
// are not data, as for `datasets`.
std::vector<std::string> data_files_under(const fs::path& base) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(base, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(".") || name.starts_with("__")) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec) && is_data_file(name))
      out.push_back(fs::relative(it->path(), base, ec).generic_string());
  }
  if (ec) fail("cannot list the dataset folder '", base.string(), "': ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> matching(const std::vector<std::string>& files, const std::string& glob) {
  const std::regex re = glob_regex(glob);
  std::vector<std::string> out;
  for (const std::string& f : files)
    if (std::regex_match(f, re)) out.push_back(f);
  return out;
}

// datasets' default patterns (data_files.py): the splits and their files of a plain folder.
std::map<std::string, std::vector<std::string>> resolve_splits(const std::vector<std::string>& files,
                                                                std::vector<std::string>* order) {
  std::map<std::string, std::vector<std::string>> splits;
  order->clear();
  // data/{split}-00000-of-00001.parquet: the hub's own layout names every split.
  const std::regex sharded("data/([^/]*)-[0-9]{5}-of-[0-9]{5}[^/]*\\.[^/]*");
  for (const std::string& f : files)
    if (std::smatch m; std::regex_match(f, m, sharded)) splits[m[1].str()].push_back(f);
  if (!splits.empty()) {
    for (const char* s : {"train", "validation", "test"})
      if (splits.count(s)) order->push_back(s);
    for (const auto& [name, _] : splits)
      if (std::find(order->begin(), order->end(), name) == order->end()) order->push_back(name);
    return splits;
  }
  const std::vector<std::pair<std::string, std::vector<std::string>>> keywords = {
      {"train", {"train", "training"}},
      {"validation", {"validation", "valid", "dev", "val"}},
      {"test", {"test", "testing", "eval", "evaluation"}}};
  const std::string sep = "[-._ 0-9]";
  const std::vector<std::string> in_dir = {"{k}/**/*", "{k}" + sep + "*/**/*",
                                           "**/*[-._ 0-9/]{k}/**/*",
                                           "**/*[-._ 0-9/]{k}" + sep + "*/**/*"};
  const std::vector<std::string> in_name = {"**/*[-._ 0-9/]{k}" + sep + "*", "{k}" + sep + "*"};
  for (const auto* patterns : {&in_dir, &in_name}) {
    for (const auto& [split, words] : keywords) {
      // A split's files: what all its patterns match, in the patterns' order (datasets resolves
      // every pattern of a split that has any file).
      std::vector<std::string>& mine = splits[split];
      for (const std::string& w : words)
        for (std::string p : *patterns) {
          p.replace(p.find("{k}"), 3, w);
          for (const std::string& f : matching(files, p))
            if (std::find(mine.begin(), mine.end(), f) == mine.end()) mine.push_back(f);
        }
      if (mine.empty()) splits.erase(split);
      else order->push_back(split);
    }
    if (!splits.empty()) return splits;
  }
  if (!files.empty()) {
    splits["train"] = files;
    order->push_back("train");
  }
  return splits;
}

struct Folder {
  fs::path base;                                        // hf_path/hf_data_dir
  std::map<std::string, std::vector<std::string>> splits;  // name -> files, relative to base
  std::vector<std::string> order;
  std::string kind;  // for messages
};

// A save_to_disk Dataset folder: its state.json names its Arrow files.
std::vector<std::string> saved_arrow_files(const fs::path& dir) {
  const Json state = read_json_file(dir / "state.json");
  std::vector<std::string> out;
  if (!state.contains("_data_files") || !state["_data_files"].is_array())
    fail("'", (dir / "state.json").string(),
         "' has no \"_data_files\" list: not a datasets.save_to_disk folder, or damaged");
  for (const Json& f : state["_data_files"]) {
    if (!f.is_object() || !f.contains("filename") || !f["filename"].is_string())
      fail("'", (dir / "state.json").string(), "': an entry of \"_data_files\" has no filename");
    out.push_back((dir / f["filename"].get<std::string>()).lexically_relative(dir).generic_string());
  }
  return out;
}

Folder read_folder(const std::string& path, const std::string& data_dir) {
  if (path.empty()) fail("dataset_type=hf needs hf_path: a dataset folder on disk");
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    fail("hf_path '", path, "' is not a folder", fs::exists(path, ec) ? "" : " (it does not exist)",
         ": gemmax reads Hugging Face datasets on disk; download one with `huggingface-cli "
         "download --repo-type dataset ", path, " --local-dir DIR` (or save it with "
         "datasets' save_to_disk) and set hf_path=DIR");
  Folder f;
  f.base = data_dir.empty() ? fs::path(path) : fs::path(path) / data_dir;
  if (!fs::is_directory(f.base, ec))
    fail("hf_data_dir '", data_dir, "' is not a folder of hf_path '", path, "'");
  if (fs::exists(f.base / "dataset_dict.json", ec)) {  // save_to_disk of a DatasetDict
    f.kind = "a datasets.save_to_disk folder (dataset_dict.json)";
    const Json dict = read_json_file(f.base / "dataset_dict.json");
    if (!dict.contains("splits") || !dict["splits"].is_array())
      fail("'", (f.base / "dataset_dict.json").string(), "' has no \"splits\" list");
    for (const Json& s : dict["splits"]) {
      const std::string name = s.get<std::string>();
      for (const std::string& file : saved_arrow_files(f.base / name))
        f.splits[name].push_back(name + "/" + file);
      f.order.push_back(name);
    }
    return f;
  }
  if (fs::exists(f.base / "state.json", ec)) {  // save_to_disk of one Dataset
    f.kind = "a datasets.save_to_disk folder (state.json)";
    const Json state = read_json_file(f.base / "state.json");
    const std::string split = state.contains("_split") && state["_split"].is_string()
                                  ? state["_split"].get<std::string>()
                                  : "train";
    f.splits[split] = saved_arrow_files(f.base);
    f.order = {split};
    return f;
  }
  f.kind = "a dataset folder";
  f.splits = resolve_splits(data_files_under(f.base), &f.order);
  return f;
}

std::vector<std::string> split_list(const std::string& spec) {
  std::vector<std::string> out;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool has_glob(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// hf_train_files: globs relative to hf_path (or absolute), each matching at least one file.
std::vector<std::string> explicit_files(const HfSplitSpec& s) {
  std::vector<std::string> out;
  for (const std::string& pattern : split_list(s.files)) {
    const fs::path p = fs::path(pattern).is_absolute() || s.path.empty()
                           ? fs::path(pattern)
                           : fs::path(s.path) / pattern;
    if (!has_glob(pattern)) {
      std::error_code ec;
      if (!fs::is_regular_file(p, ec))
        fail(s.key_files, ": '", p.string(), "' is not a file");
      out.push_back(p.string());
      continue;
    }
    // The folder before the first glob character, listed; the rest matched.
    fs::path root;
    std::string rest;
    for (const fs::path& part : p) {
      if (rest.empty() && !has_glob(part.string())) root /= part;
      else rest += (rest.empty() ? "" : "/") + part.string();
    }
    std::vector<std::string> found;
    std::error_code ec;
    if (fs::is_directory(root, ec))
      for (const std::string& f : matching(data_files_under(root), rest))
        found.push_back((root / f).string());
    if (found.empty())
      fail(s.key_files, ": '", pattern, "' matches no *.parquet, *.arrow, *.json or *.jsonl file",
           s.path.empty() ? "" : str_cat(" under '", s.path, "'"));
    out.insert(out.end(), found.begin(), found.end());
  }
  if (out.empty()) fail(s.key_files, " '", s.files, "' names no files");
  return out;
}

}  // namespace

std::vector<std::string> hf_split_files(const HfSplitSpec& s) {
  if (!s.files.empty()) return explicit_files(s);
  const Folder f = read_folder(s.path, s.data_dir);
  auto it = f.splits.find(s.split);
  if (it == f.splits.end() || it->second.empty()) {
    std::string have;
    for (const std::string& name : f.order)
      have += str_cat(have.empty() ? "" : ", ", name, " (", f.splits.at(name).size(), " file",
                      f.splits.at(name).size() == 1 ? "" : "s", ")");
    fail(s.key_split, "=", s.split, ": ", f.kind, " '", f.base.string(),
         "' has no data file for split '", s.split, "' (",
         have.empty() ? std::string("it holds no *.parquet, *.arrow, *.json or *.jsonl file")
                      : "its splits: " + have,
         "): set ", s.key_split, " to one of its splits, hf_data_dir to the folder that holds it, "
         "or ", s.key_files, " to its files");
  }
  std::vector<std::string> out;
  for (const std::string& rel : it->second) out.push_back((f.base / rel).string());
  return out;
}

std::vector<std::string> hf_splits(const std::string& path, const std::string& data_dir) {
  return read_folder(path, data_dir).order;
}

bool is_arrow_data_file(const std::string& path) {
  const std::string e = extension(path);
  return e == ".parquet" || e == ".arrow";
}

void for_each_hf_row(const std::string& path, const std::vector<std::string>& columns,
                     const std::function<void(const Json&, const std::string&)>& row,
                     const std::function<void(uint64_t)>& read) {
  auto text_column_error = [&](const std::string& where, const std::string& column,
                               std::string_view type) {
    fail(where, ": column \"", column, "\" is ", type,
         ", expected text (a string column): name a text column in train_data_columns / "
         "eval_data_columns (gemmax tokenize: --data_columns), or \"messages\" for conversations");
  };
  auto messages_error = [&](const std::string& where, std::string_view type) {
    fail(where, ": column \"messages\" is ", type,
         ", expected a list of {\"role\", \"content\"} turns: give the conversations as lists of "
         "turns, or name the dataset's text column in train_data_columns");
  };
  if (is_arrow_data_file(path)) {
    uint64_t n = 0;
    Json record = Json::object();
    read_arrow_rows(
        path, extension(path) == ".parquet" ? ArrowFormat::Parquet : ArrowFormat::Ipc, columns,
        [&](std::span<const ArrowCell> cells) {
          const std::string where = str_cat(path, ": row ", ++n);
          record = Json::object();
          for (size_t c = 0; c < cells.size(); ++c) {
            const ArrowCell& cell = cells[c];
            const bool messages = columns[c] == "messages";
            if (cell.kind == ArrowCell::Kind::Other) {
              if (messages) messages_error(where, cell.type);
              text_column_error(where, columns[c], cell.type);
            }
            if (messages && cell.kind == ArrowCell::Kind::String) messages_error(where, cell.type);
            if (!messages && cell.kind == ArrowCell::Kind::Json)
              text_column_error(where, columns[c], cell.type);
            if (!messages && cell.kind == ArrowCell::Kind::Null)
              fail(where, ": column \"", columns[c],
                   "\" is null: every row needs its text; drop the row or fill it");
            if (cell.kind == ArrowCell::Kind::String) record[columns[c]] = std::string(cell.data);
            else if (cell.kind == ArrowCell::Kind::Json) record[columns[c]] = Json::parse(cell.data);
            else record[columns[c]] = nullptr;
          }
          row(record, where);
        });
    return;
  }
  // JSON Lines (datasets' json builder), or one JSON array of records.
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read input '", path, "': no such file, or not readable");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  auto one = [&](const Json& j, uint64_t n) {
    const std::string where = str_cat(path, ":", n);
    if (columns.empty()) return row(j, where);  // the record encoder checks it
    if (!j.is_object())
      fail(where, ": expected a JSON object (a row of the dataset), got ", j.type_name());
    Json record = Json::object();
    for (const std::string& c : columns) {
      if (!j.contains(c)) {
        std::string have;
        for (const auto& [k, _] : j.items()) have += (have.empty() ? "" : ", ") + k;
        fail(path, ":", n, ": the row has no column \"", c, "\" (its columns: ", have,
             "): name its columns in train_data_columns/eval_data_columns (gemmax tokenize: "
             "--data_columns)");
      }
      const Json& v = j[c];
      if (c == "messages" && !v.is_array()) messages_error(where, v.type_name());
      if (c != "messages" && !v.is_string()) text_column_error(where, c, v.type_name());
      record[c] = v;
    }
    row(record, where);
  };
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    Json all;
    try {
      all = Json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(path, ": not valid JSON (", e.what(), "); a .json input is JSON Lines or one array");
    }
    for (size_t k = 0; k < all.size(); ++k) one(all[k], k + 1);
    return;
  }
  size_t begin = 0, number = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view line = std::string_view(text).substr(begin, end - begin);
    ++number;
    begin = end + 1;
    if (read) read(std::min(begin, text.size()));
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    Json j;
    try {
      j = parse_chat_line(std::string(line));  // integers beyond 64 bits refused, not rounded
    } catch (const nlohmann::json::exception& e) {
      fail(path, ":", number, ": not valid JSON (", e.what(),
           "); a .jsonl input needs one JSON object per line");
    } catch (const Error& e) {
      fail(path, ":", number, ": ", e.what());
    }
    one(j, number);
  }
}

}  // namespace gemmax

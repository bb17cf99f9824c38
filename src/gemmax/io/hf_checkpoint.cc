#include "gemmax/io/hf_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gemmax/base/progress.h"
#include "gemmax/io/atomic_file.h"

namespace fs = std::filesystem;

namespace gemmax {
namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("error reading '", path, "'");
  return ss.str();
}

// What a folder holds, for the error when it has no weights we can read.
std::string describe_folder(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  if (names.empty()) return "the folder is empty";
  std::string s = "found: ";
  for (size_t i = 0; i < names.size() && i < 20; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 20) s += str_cat(", ... (", names.size(), " entries)");
  return s;
}

bool is_plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos;
}

bool is_shard_name(const std::string& s) {
  static const std::regex re(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(s, re);
}

void remove_file(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
  if (ec) fail("cannot remove '", p.string(), "': ", ec.message());
}

}  // namespace

std::string hf_shard_name(int index, int count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", index, count);
  return buf;
}

HfCheckpoint HfCheckpoint::open(const std::string& dir) {
  HfCheckpoint c;
  c.dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("Hugging Face checkpoint '", dir, "' is not a directory");
  const fs::path index_path = fs::path(dir) / kHfIndexFile;
  const fs::path single_path = fs::path(dir) / kHfWeightsFile;
  const bool has_index = fs::exists(index_path, ec);
  const bool has_single = fs::exists(single_path, ec);
  if (has_index && has_single)
    fail("'", dir, "' holds both ", kHfWeightsFile, " and ", kHfIndexFile,
         "; transformers would load ", kHfWeightsFile,
         " and ignore the index. Remove whichever is stale");
  if (!has_index && !has_single)
    fail("'", dir, "' has neither ", kHfIndexFile, " nor ", kHfWeightsFile,
         " (gemmax reads safetensors weights only); ", describe_folder(dir));

  if (has_single) {
    c.shard_names_.push_back(kHfWeightsFile);
    c.shards_.push_back(SafetensorsFile::open(single_path.string()));
    for (const SafetensorsEntry& e : c.shards_[0].entries()) c.where_[e.name] = 0;
    return c;
  }

  c.sharded_ = true;
  const std::string ipath = index_path.string();
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text_file(ipath));
  } catch (const nlohmann::json::exception& e) {
    fail("'", ipath, "' is not valid JSON: ", e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail("'", ipath, "' must be a JSON object with a \"weight_map\" object");
  std::map<std::string, std::string> map;  // tensor -> shard file
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string())
      fail("'", ipath, "': weight_map[\"", name, "\"] must be a file name string, got ",
           file.dump());
    const std::string f = file.get<std::string>();
    if (!is_plain_file_name(f))
      fail("'", ipath, "': weight_map[\"", name, "\"] = \"", f,
           "\" is not a plain file name in the checkpoint folder");
    map[name] = f;
    files.insert(f);
  }
  for (const std::string& f : files) {
    const fs::path p = fs::path(dir) / f;
    if (!fs::exists(p, ec)) {
      std::string example;
      for (const auto& [name, file] : map)
        if (file == f) {
          example = name;
          break;
        }
      fail("'", ipath, "' lists shard '", f, "' (for tensor '", example, "' and others) but '",
           p.string(), "' does not exist; the checkpoint is incomplete");
    }
    c.shard_names_.push_back(f);
    c.shards_.push_back(SafetensorsFile::open(p.string()));
  }
  for (const auto& [name, file] : map) {
    const size_t i = size_t(std::find(c.shard_names_.begin(), c.shard_names_.end(), file) -
                            c.shard_names_.begin());
    if (!c.shards_[i].has(name))
      fail("'", ipath, "' maps tensor '", name, "' to '", file, "', but that shard has no such ",
           "tensor; the index and the shards do not belong together");
    c.where_[name] = i;
  }
  return c;
}

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

size_t HfCheckpoint::shard_index(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("checkpoint '", dir_, "' has no tensor named '", name, "'");
  return it->second;
}

const SafetensorsEntry& HfCheckpoint::entry(const std::string& name) const {
  return shards_[shard_index(name)].entry(name);
}

const std::string& HfCheckpoint::shard_of(const std::string& name) const {
  return shard_names_[shard_index(name)];
}

Tensor HfCheckpoint::tensor(const std::string& name) const {
  return shards_[shard_index(name)].tensor(name);
}

Tensor HfCheckpoint::read_as(const std::string& name, DType dtype, MemKind kind) const {
  return shards_[shard_index(name)].read_as(name, dtype, kind);
}

void write_hf_checkpoint(const std::string& dir, const NamedTensors& tensors,
                         uint64_t max_shard_bytes, const StringMap& metadata) {
  if (max_shard_bytes == 0) fail("write_hf_checkpoint: max_shard_bytes must be positive");
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors)
    if (!seen.insert(name).second)
      fail("write_hf_checkpoint: tensor name '", name, "' appears twice");

  // Shards in the given order, as huggingface_hub's split_torch_state_dict_into_shards does.
  std::vector<NamedTensors> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& nt : tensors) {
    const uint64_t b = nt.second.defined() ? nt.second.nbytes() : 0;
    if (!shards.back().empty() && in_shard + b > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(nt);
    in_shard += b;
    total += b;
  }
  StringMap md = metadata;
  if (!md.count("format")) md["format"] = "pt";
  // Validate every shard (names, dtypes, host memory) before touching the folder.
  for (const NamedTensors& s : shards) safetensors_header(s, md, nullptr);

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    fail("cannot create checkpoint folder '", dir, "': ", ec.message());
  const fs::path root(dir);

  // First hide the previous checkpoint: without its index (or single file) a half-written
  // folder cannot pass for a complete one.
  if (fs::exists(root / kHfIndexFile)) remove_file(root / kHfIndexFile);
  std::set<std::string> keep;
  Progress progress("writing " + dir, double(total), "bytes");
  if (shards.size() == 1) {
    fsync_directory(dir);
    write_safetensors((root / kHfWeightsFile).string(), shards[0], md, &progress);
    keep.insert(kHfWeightsFile);
  } else {
    if (fs::exists(root / kHfWeightsFile)) remove_file(root / kHfWeightsFile);
    fsync_directory(dir);
    const int n = int(shards.size());
    nlohmann::json weight_map = nlohmann::json::object();
    for (int i = 0; i < n; ++i) {
      const std::string file = hf_shard_name(i + 1, n);
      write_safetensors((root / file).string(), shards[size_t(i)], md, &progress);
      for (const auto& [name, t] : shards[size_t(i)]) weight_map[name] = file;
      keep.insert(file);
    }
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic((root / kHfIndexFile).string(), index.dump(2) + "\n");
    keep.insert(kHfIndexFile);
  }
  progress.finish();
  // Shards of an earlier, differently sized checkpoint.
  bool removed = false;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (is_shard_name(name) && !keep.count(name)) {
      remove_file(e.path());
      removed = true;
    }
  }
  if (removed) fsync_directory(dir);
}

}  // namespace gemmax

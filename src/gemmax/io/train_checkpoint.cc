#include "gemmax/io/train_checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "gemmax/base/error.h"
#include "gemmax/base/progress.h"
#include "gemmax/io/atomic_file.h"

namespace gemmax {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "gemmax-train-state";
constexpr int kVersion = 1;
constexpr const char* kParams = "params.safetensors";
constexpr const char* kOptimizer = "optimizer.safetensors";
constexpr const char* kState = "state.json";

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", (long long)step);
  return buf;
}

// step_<digits> -> step; anything else (or more than 18 digits) -> -1.
int64_t parse_step(const std::string& name) {
  if (name.size() <= 5 || name.size() > 5 + 18 || name.rfind("step_", 0) != 0) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

uint64_t file_bytes(const fs::path& p) {
  std::error_code ec;
  const uintmax_t n = fs::file_size(p, ec);
  return ec ? 0 : uint64_t(n);
}

struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

FileDigest digest(const std::string& path, Progress& progress) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read checkpoint file '", path, "'");
  FileDigest d;
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), uInt(n));
    d.bytes += uint64_t(n);
    progress.add(double(n));
  }
  d.crc = uint32_t(crc);
  return d;
}

// Removes what interrupted saves and deletions (crash, kill, forced stop) left behind: the
// step_<N>.tmp folders being written and the step_<N>.old folders being deleted.
void remove_leftovers(const std::string& checkpoints_dir) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool leftover = name.ends_with(".tmp") || name.ends_with(".old");
    if (leftover && parse_step(name.substr(0, name.size() - 4)) >= 0) stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

// Deletes a checkpoint so that no interruption can leave a damaged folder that looks complete:
// the folder is first renamed to step_<N>.old (one atomic step), then removed.
void remove_checkpoint(const std::string& dir) {
  std::error_code ec;
  const fs::path old = dir + ".old";
  fs::remove_all(old, ec);
  fs::rename(dir, old, ec);
  fs::remove_all(ec ? fs::path(dir) : old, ec);
}

// A checkpoint must never hold a NaN or an infinity: resuming from it could not recover.
void check_finite(const NamedTensors& tensors, const std::string& what, int64_t step) {
  for (const auto& [name, t] : tensors) {
    if (!is_float(t.dtype())) continue;
    for (int64_t i = 0; i < t.numel(); ++i)
      if (const double v = get_as_double(t, i); !std::isfinite(v))
        fail("refusing to save checkpoint step ", step, ": ", what, " '", name, "' holds ", v,
             " at element ", i, "; the previous checkpoints are kept as they are");
  }
}

// The JSON kinds state.json's keys must have.
enum class Kind { Object, String, Count };

const char* kind_name(Kind k) {
  return k == Kind::Object   ? "an object"
         : k == Kind::String ? "a string"
                             : "a non-negative integer";
}

bool has_kind(const nlohmann::json& v, Kind k) {
  return k == Kind::Object   ? v.is_object()
         : k == Kind::String ? v.is_string()
                             : v.is_number_unsigned();
}

// A JSON value for a message, cut short if long.
std::string excerpt(const nlohmann::json& v) {
  const std::string s = v.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

// `parent[key]` of state.json, checked to exist with the right kind; `where` names the parent
// ("" for the top level, else e.g. "files.params.safetensors") in the message.
const nlohmann::json& required(const nlohmann::json& parent, const std::string& key, Kind kind,
                               const std::string& state_path, const std::string& where = "") {
  const std::string name = where.empty() ? key : where + "." + key;
  const auto it = parent.find(key);
  if (it == parent.end())
    fail("checkpoint file '", state_path, "' has no key '", name, "' (expected ", kind_name(kind),
         "); the checkpoint is damaged or not written by gemmax: remove it to resume from an "
         "earlier one");
  if (!has_kind(*it, kind))
    fail("checkpoint file '", state_path, "': key '", name, "' must be ", kind_name(kind), ", got ",
         excerpt(*it), "; the checkpoint is damaged: remove it to resume from an earlier one");
  return *it;
}

}  // namespace

std::string save_train_checkpoint(const std::string& checkpoints_dir, int64_t step,
                                  const NamedTensors& params, const NamedTensors& optimizer,
                                  const nlohmann::json& state, int64_t keep) {
  check_finite(params, "parameter", step);
  check_finite(optimizer, "optimizer state", step);
  const fs::path final_dir = fs::path(checkpoints_dir) / step_name(step);
  const fs::path tmp_dir = fs::path(checkpoints_dir) / (step_name(step) + ".tmp");
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  if (ec) fail("cannot create checkpoint folder '", checkpoints_dir, "': ", ec.message());
  remove_leftovers(checkpoints_dir);
  fs::create_directory(tmp_dir, ec);
  if (ec) fail("cannot create '", tmp_dir.string(), "': ", ec.message());
  try {
    Progress saving("saving " + final_dir.string(),
                    double(tensor_bytes(params) + tensor_bytes(optimizer)), "bytes");
    write_safetensors((tmp_dir / kParams).string(), params, {}, &saving);
    write_safetensors((tmp_dir / kOptimizer).string(), optimizer, {}, &saving);
    saving.finish();
    Progress checking("checksumming " + final_dir.string(),
                      double(file_bytes(tmp_dir / kParams) + file_bytes(tmp_dir / kOptimizer)),
                      "bytes");
    nlohmann::json full = state;
    full["format"] = kFormat;
    full["version"] = kVersion;
    full["step"] = step;
    for (const char* f : {kParams, kOptimizer}) {
      const FileDigest d = digest((tmp_dir / f).string(), checking);
      full["files"][f] = {{"bytes", d.bytes}, {"crc32", d.crc}};
    }
    checking.finish();
    write_file_atomic((tmp_dir / kState).string(), full.dump(1) + "\n");
    if (fs::exists(final_dir)) remove_checkpoint(final_dir.string());  // an earlier attempt
    fs::rename(tmp_dir, final_dir, ec);
    if (ec) fail("cannot rename '", tmp_dir.string(), "' to '", final_dir.string(), "': ", ec.message());
    fsync_directory(checkpoints_dir);
  } catch (...) {
    fs::remove_all(tmp_dir, ec);
    throw;
  }
  if (keep > 0) {
    const std::vector<CheckpointRef> all = list_train_checkpoints(checkpoints_dir);
    for (size_t i = 0; i + size_t(keep) < all.size(); ++i) remove_checkpoint(all[i].dir);
  }
  return final_dir.string();
}

std::vector<CheckpointRef> list_train_checkpoints(const std::string& checkpoints_dir) {
  std::vector<CheckpointRef> out;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const int64_t step = parse_step(e.path().filename().string());
    if (step >= 0 && e.is_directory() && fs::exists(e.path() / kState))
      out.push_back({step, e.path().string()});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.step < b.step; });
  return out;
}

TrainCheckpoint open_train_checkpoint(const std::string& dir) {
  const fs::path d(dir);
  const std::string state_path = (d / kState).string();
  if (!fs::exists(state_path))
    fail("'", dir, "' is not a checkpoint: it has no ", kState);
  nlohmann::json state;
  try {
    std::ifstream in(state_path);
    state = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint file '", state_path, "' is not valid JSON (", e.what(), ")");
  }
  if (!state.is_object())
    fail("checkpoint file '", state_path, "' is not a gemmax train state (not a JSON object)");
  if (required(state, "format", Kind::String, state_path) != kFormat)
    fail("checkpoint file '", state_path, "' is not a gemmax train state (format ",
         excerpt(state["format"]), ", expected \"", kFormat, "\")");
  const uint64_t version = required(state, "version", Kind::Count, state_path).get<uint64_t>();
  if (version != kVersion)
    fail("checkpoint file '", state_path, "': format version ", version,
         " is not the supported version ", kVersion);
  const uint64_t step = required(state, "step", Kind::Count, state_path).get<uint64_t>();
  if (step > uint64_t(std::numeric_limits<int64_t>::max()))
    fail("checkpoint file '", state_path, "': step ", step, " is out of range");
  if (const int64_t named = parse_step(d.filename().string());
      named >= 0 && uint64_t(named) != step)
    fail("checkpoint file '", state_path, "' says step ", step, " but its folder name says ", named,
         "; the checkpoint is damaged: remove it to resume from an earlier one");
  required(state, "config", Kind::Object, state_path);
  required(state, "data", Kind::Object, state_path);
  const nlohmann::json& files = required(state, "files", Kind::Object, state_path);
  Progress checking("checking " + dir, double(file_bytes(d / kParams) + file_bytes(d / kOptimizer)),
                    "bytes");
  for (const char* f : {kParams, kOptimizer}) {
    const std::string where = std::string("files.") + f;
    const nlohmann::json& want = required(files, f, Kind::Object, state_path, "files");
    const uint64_t bytes = required(want, "bytes", Kind::Count, state_path, where).get<uint64_t>();
    const uint64_t crc = required(want, "crc32", Kind::Count, state_path, where).get<uint64_t>();
    if (!fs::exists(d / f)) fail("checkpoint '", dir, "' is missing ", f);
    const FileDigest got = digest((d / f).string(), checking);
    if (got.bytes != bytes)
      fail("checkpoint '", dir, "': ", f, " has ", got.bytes, " bytes but ", bytes,
           " were written (truncated or damaged); remove this checkpoint to resume from an "
           "earlier one");
    if (got.crc != crc)
      fail("checkpoint '", dir, "': ", f, " fails its CRC-32 check (corrupted); remove this "
           "checkpoint to resume from an earlier one");
  }
  checking.finish();
  TrainCheckpoint c{{int64_t(step), dir},
                    state,
                    SafetensorsFile::open((d / kParams).string()),
                    SafetensorsFile::open((d / kOptimizer).string())};
  c.state.erase("files");
  return c;
}

CheckpointRef find_train_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (!fs::exists(p)) fail("checkpoint path '", path, "' does not exist");
  if (fs::exists(p / kState)) return {parse_step(p.filename().string()), path};
  for (const fs::path& dir : {p, p / "checkpoints"}) {
    const auto all = list_train_checkpoints(dir.string());
    if (!all.empty()) return all.back();
  }
  fail("no checkpoint in '", path, "' (expected a step_<N> folder, a checkpoints/ folder, or a "
       "run folder holding one)");
}

}  // namespace gemmax

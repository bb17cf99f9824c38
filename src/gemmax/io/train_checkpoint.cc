#include "gemmax/io/train_checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

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

// step_<digits> -> step; anything else -> -1.
int64_t parse_step(const std::string& name) {
  if (name.size() <= 5 || name.rfind("step_", 0) != 0) return -1;
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

}  // namespace

std::string save_train_checkpoint(const std::string& checkpoints_dir, int64_t step,
                                  const NamedTensors& params, const NamedTensors& optimizer,
                                  const nlohmann::json& state, int64_t keep) {
  const fs::path final_dir = fs::path(checkpoints_dir) / step_name(step);
  const fs::path tmp_dir = fs::path(checkpoints_dir) / (step_name(step) + ".tmp");
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  if (ec) fail("cannot create checkpoint folder '", checkpoints_dir, "': ", ec.message());
  fs::remove_all(tmp_dir, ec);  // a leftover of an interrupted save of the same step
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
    fs::remove_all(final_dir, ec);  // a checkpoint of the same step from an earlier attempt
    fs::rename(tmp_dir, final_dir, ec);
    if (ec) fail("cannot rename '", tmp_dir.string(), "' to '", final_dir.string(), "': ", ec.message());
    fsync_directory(checkpoints_dir);
  } catch (...) {
    fs::remove_all(tmp_dir, ec);
    throw;
  }
  if (keep > 0) {
    const std::vector<CheckpointRef> all = list_train_checkpoints(checkpoints_dir);
    for (size_t i = 0; i + size_t(keep) < all.size(); ++i) fs::remove_all(all[i].dir, ec);
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
  const fs::path state_path = d / kState;
  if (!fs::exists(state_path))
    fail("'", dir, "' is not a checkpoint: it has no ", kState);
  nlohmann::json state;
  try {
    std::ifstream in(state_path);
    state = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint '", dir, "': ", kState, " is not valid JSON (", e.what(), ")");
  }
  if (!state.is_object() || state.value("format", "") != kFormat)
    fail("checkpoint '", dir, "': ", kState, " is not a gemmax train state");
  if (state.value("version", 0) != kVersion)
    fail("checkpoint '", dir, "': format version ", state.value("version", 0),
         " is not the supported version ", kVersion);
  Progress checking("checking " + dir, double(file_bytes(d / kParams) + file_bytes(d / kOptimizer)),
                    "bytes");
  for (const char* f : {kParams, kOptimizer}) {
    const auto& want = state["files"][f];
    if (!want.is_object()) fail("checkpoint '", dir, "': ", kState, " lists no ", f);
    if (!fs::exists(d / f)) fail("checkpoint '", dir, "' is missing ", f);
    const FileDigest got = digest((d / f).string(), checking);
    if (got.bytes != want["bytes"].get<uint64_t>())
      fail("checkpoint '", dir, "': ", f, " has ", got.bytes, " bytes but ", want["bytes"].get<uint64_t>(),
           " were written (truncated or damaged); remove this checkpoint to resume from an "
           "earlier one");
    if (got.crc != want["crc32"].get<uint32_t>())
      fail("checkpoint '", dir, "': ", f, " fails its CRC-32 check (corrupted); remove this "
           "checkpoint to resume from an earlier one");
  }
  checking.finish();
  TrainCheckpoint c{{state["step"].get<int64_t>(), dir}, state,
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

#include "gemmax/io/train_checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "gemmax/base/convert.h"
#include "gemmax/base/error.h"
#include "gemmax/io/atomic_file.h"

namespace gemmax {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "gemmax-train-state";
constexpr int kVersion = 1;
constexpr const char* kParams = "params.safetensors";
constexpr const char* kOptimizer = "optimizer.safetensors";
constexpr const char* kState = "state.json";
constexpr const char* kPiecesKey = "gemmax_pieces";  // a sharded file's metadata

// "params.rank00001-of-00004.safetensors"
std::string shard_file(const char* kind, int64_t rank, int64_t ranks) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s.rank%05lld-of-%05lld.safetensors", kind, (long long)rank,
                (long long)ranks);
  return buf;
}

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

struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

FileDigest digest(const std::string& path) {
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
  }
  d.crc = uint32_t(crc);
  return d;
}

void write_pieces(const std::string& path, const std::vector<TensorPiece>& pieces) {
  NamedTensors tensors;
  nlohmann::json where = nlohmann::json::object();
  for (const TensorPiece& p : pieces) {
    tensors.emplace_back(p.name, p.piece.view({p.piece.numel()}));
    where[p.name] = {{"begin", p.begin}, {"shape", p.shape}};
  }
  write_safetensors(path, tensors, {{kPiecesKey, where.dump()}});
}

void prune(const std::string& checkpoints_dir, int64_t keep) {
  if (keep <= 0) return;
  std::error_code ec;
  const std::vector<CheckpointRef> all = list_train_checkpoints(checkpoints_dir);
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) fs::remove_all(all[i].dir, ec);
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
    write_safetensors((tmp_dir / kParams).string(), params);
    write_safetensors((tmp_dir / kOptimizer).string(), optimizer);
    nlohmann::json full = state;
    full["format"] = kFormat;
    full["version"] = kVersion;
    full["step"] = step;
    for (const char* f : {kParams, kOptimizer}) {
      const FileDigest d = digest((tmp_dir / f).string());
      full["files"][f] = {{"bytes", d.bytes}, {"crc32", d.crc}};
    }
    write_file_atomic((tmp_dir / kState).string(), full.dump(1) + "\n");
    fs::remove_all(final_dir, ec);  // a checkpoint of the same step from an earlier attempt
    fs::rename(tmp_dir, final_dir, ec);
    if (ec)
      fail("cannot rename '", tmp_dir.string(), "' to '", final_dir.string(), "': ", ec.message());
    fsync_directory(checkpoints_dir);
  } catch (...) {
    fs::remove_all(tmp_dir, ec);
    throw;
  }
  prune(checkpoints_dir, keep);
  return final_dir.string();
}

std::string save_sharded_checkpoint(Comm& comm, const std::string& checkpoints_dir, int64_t step,
                                    const std::vector<TensorPiece>& params,
                                    const std::vector<TensorPiece>& optimizer,
                                    const nlohmann::json& state, int64_t keep,
                                    const std::function<void(const std::string&)>& on_file) {
  const fs::path final_dir = fs::path(checkpoints_dir) / step_name(step);
  const fs::path tmp_dir = fs::path(checkpoints_dir) / (step_name(step) + ".tmp");
  const int64_t rank = comm.rank(), ranks = comm.size();
  std::error_code ec;
  if (rank == 0) {
    fs::create_directories(checkpoints_dir, ec);
    if (ec) fail("cannot create checkpoint folder '", checkpoints_dir, "': ", ec.message());
    fs::remove_all(tmp_dir, ec);  // a leftover of an interrupted save of the same step
    fs::create_directory(tmp_dir, ec);
    if (ec) fail("cannot create '", tmp_dir.string(), "': ", ec.message());
  }
  comm.barrier("the checkpoint folder");
  // Each rank writes its own files, then tells rank 0 their sizes and CRC-32s.
  const std::string names[2] = {shard_file("params", rank, ranks),
                                shard_file("optimizer", rank, ranks)};
  Tensor digests = control_buffer({4}, DType::I64);
  for (int f = 0; f < 2; ++f) {
    const std::string path = (tmp_dir / names[f]).string();
    write_pieces(path, f == 0 ? params : optimizer);
    if (on_file) on_file(path);
    const FileDigest d = digest(path);
    digests.data<int64_t>()[2 * f] = int64_t(d.bytes);
    digests.data<int64_t>()[2 * f + 1] = int64_t(d.crc);
  }
  Tensor all = control_buffer({4 * ranks}, DType::I64);
  comm.all_gather(digests, all, "the checkpoint files' digests").wait();
  if (rank == 0) {
    try {
      nlohmann::json full = state;
      full["format"] = kFormat;
      full["version"] = kVersion;
      full["step"] = step;
      full["ranks"] = ranks;
      for (int64_t r = 0; r < ranks; ++r)
        for (int f = 0; f < 2; ++f) {
          const int64_t* d = all.data<int64_t>() + 4 * r + 2 * f;
          full["files"][shard_file(f == 0 ? "params" : "optimizer", r, ranks)] = {
              {"bytes", uint64_t(d[0])}, {"crc32", uint32_t(d[1])}};
        }
      write_file_atomic((tmp_dir / kState).string(), full.dump(1) + "\n");
      fs::remove_all(final_dir, ec);  // a checkpoint of the same step from an earlier attempt
      fs::rename(tmp_dir, final_dir, ec);
      if (ec)
        fail("cannot rename '", tmp_dir.string(), "' to '", final_dir.string(),
             "': ", ec.message());
      fsync_directory(checkpoints_dir);
    } catch (...) {
      fs::remove_all(tmp_dir, ec);
      throw;
    }
    prune(checkpoints_dir, keep);
  }
  comm.barrier("the checkpoint commit");
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

const Shape& CheckpointTensors::shape(const std::string& name) const {
  auto it = shapes_.find(name);
  if (it == shapes_.end()) fail("checkpoint '", dir_, "' has no tensor '", name, "'");
  return it->second;
}

void CheckpointTensors::check(const File& f) const {
  if (f.checked) return;
  const FileDigest got = digest(f.st.path());
  const std::string name = fs::path(f.st.path()).filename().string();
  if (got.bytes != f.bytes)
    fail("checkpoint '", dir_, "': ", name, " has ", got.bytes, " bytes but ", f.bytes,
         " were written (truncated or damaged); remove this checkpoint to resume from an "
         "earlier one");
  if (got.crc != f.crc)
    fail("checkpoint '", dir_, "': ", name,
         " fails its CRC-32 check (corrupted); remove this "
         "checkpoint to resume from an earlier one");
  f.checked = true;
}

void CheckpointTensors::read(const std::string& name, int64_t begin, const Tensor& out) const {
  const Shape& full = shape(name);
  const int64_t count = out.numel(), end = begin + count;
  GEMMAX_CHECK(begin >= 0 && end <= shape_numel(full), "checkpoint '", dir_, "': elements [", begin,
               ", ", end, ") of '", name, "' ", shape_str(full));
  int64_t covered = 0;
  for (const Piece& p : pieces_.at(name)) {
    const int64_t lo = std::max(begin, p.begin), hi = std::min(end, p.begin + p.count);
    if (lo >= hi) continue;
    const File& f = files_[p.file];
    check(f);
    const Tensor src = f.st.tensor(name);
    const Tensor part = convert_dtype(src.flat_slice(lo - p.begin, {hi - lo}), out.dtype());
    std::memcpy(static_cast<char*>(out.raw()) + (lo - begin) * int64_t(dtype_size(out.dtype())),
                part.raw(), part.nbytes());
    covered += hi - lo;
  }
  if (covered != count)
    fail("checkpoint '", dir_, "': the files hold ", covered, " of elements [", begin, ", ", end,
         ") of '", name, "' (pieces missing; the checkpoint is incomplete)");
}

Tensor CheckpointTensors::read_as(const std::string& name, DType dtype) const {
  Tensor t = Tensor::empty(shape(name), dtype, MemKind::Workspace);
  read(name, 0, t);
  return t;
}

TrainCheckpoint open_train_checkpoint(const std::string& dir) {
  const fs::path d(dir);
  const fs::path state_path = d / kState;
  if (!fs::exists(state_path)) fail("'", dir, "' is not a checkpoint: it has no ", kState);
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
  TrainCheckpoint c;
  c.ref = {state["step"].get<int64_t>(), dir};
  c.ranks = state.value("ranks", int64_t(1));
  if (c.ranks < 1) fail("checkpoint '", dir, "': ", kState, " says ranks=", c.ranks);
  const bool sharded = state.contains("ranks");
  for (CheckpointTensors* t : {&c.params, &c.optimizer}) {
    const bool params = t == &c.params;
    t->dir_ = dir;
    const int64_t files = sharded ? c.ranks : 1;
    for (int64_t r = 0; r < files; ++r) {
      const std::string f = sharded ? shard_file(params ? "params" : "optimizer", r, c.ranks)
                                    : std::string(params ? kParams : kOptimizer);
      const auto& want = state["files"][f];
      if (!want.is_object()) fail("checkpoint '", dir, "': ", kState, " lists no ", f);
      if (!fs::exists(d / f)) fail("checkpoint '", dir, "' is missing ", f);
      CheckpointTensors::File file{SafetensorsFile::open((d / f).string()),
                                   want["bytes"].get<uint64_t>(), want["crc32"].get<uint32_t>()};
      if (!sharded) t->check(file);  // one file: checked now, as every rank reads all of it
      const size_t index = t->files_.size();
      if (!sharded) {
        for (const SafetensorsEntry& e : file.st.entries()) {
          t->shapes_[e.name] = e.shape;
          t->pieces_[e.name].push_back({index, 0, shape_numel(e.shape)});
        }
      } else {
        auto meta = file.st.metadata().find(kPiecesKey);
        if (meta == file.st.metadata().end())
          fail("checkpoint '", dir, "': ", f, " has no '", kPiecesKey, "' metadata");
        const auto where = nlohmann::json::parse(meta->second, nullptr, false);
        if (!where.is_object())
          fail("checkpoint '", dir, "': ", f, "'s '", kPiecesKey, "' metadata is not JSON");
        for (const SafetensorsEntry& e : file.st.entries()) {
          if (!where.contains(e.name) || !where[e.name].contains("begin") ||
              !where[e.name].contains("shape"))
            fail("checkpoint '", dir, "': ", f, " does not place its tensor '", e.name, "'");
          const Shape shape = where[e.name]["shape"].get<Shape>();
          auto [it, fresh] = t->shapes_.emplace(e.name, shape);
          if (!fresh && it->second != shape)
            fail("checkpoint '", dir, "': '", e.name, "' has shape ", shape_str(shape), " in ", f,
                 " but ", shape_str(it->second), " in another file");
          t->pieces_[e.name].push_back(
              {index, where[e.name]["begin"].get<int64_t>(), shape_numel(e.shape)});
        }
      }
      t->files_.push_back(std::move(file));
    }
  }
  c.state = std::move(state);
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
  fail("no checkpoint in '", path,
       "' (expected a step_<N> folder, a checkpoints/ folder, or a "
       "run folder holding one)");
}

}  // namespace gemmax

#include "gemmax/checkpoint/train_checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "gemmax/base/convert.h"
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

// The same of bytes already mapped (an opened checkpoint file, which a live run may delete).
FileDigest digest(std::string_view bytes, Progress& progress) {
  FileDigest d;
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < bytes.size();) {
    const size_t n = std::min<size_t>(bytes.size() - at, 1 << 20);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), uInt(n));
    at += n;
    progress.add(double(n));
  }
  d.bytes = bytes.size();
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

// The first NaN or infinity of `t` (element `offset + i` of tensor `name`), as the reason to
// refuse the save; "" if there is none.
std::string nonfinite_value(const std::string& name, const Tensor& t, int64_t offset,
                            const std::string& what, int64_t step) {
  if (!is_float(t.dtype())) return "";
  for (int64_t i = 0; i < t.numel(); ++i)
    if (const double v = get_as_double(t, i); !std::isfinite(v))
      return str_cat("refusing to save checkpoint step ", step, ": ", what, " '", name, "' holds ",
                     v, " at element ", offset + i,
                     "; the previous checkpoints are kept as they are");
  return "";
}

// A checkpoint must never hold a NaN or an infinity: resuming from it could not recover.
void check_finite(const NamedTensors& tensors, const std::string& what, int64_t step) {
  for (const auto& [name, t] : tensors)
    if (const std::string why = nonfinite_value(name, t, 0, what, step); !why.empty()) fail(why);
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

void write_pieces(const std::string& path, const std::vector<TensorPiece>& pieces,
                  Progress& progress) {
  NamedTensors tensors;
  nlohmann::json where = nlohmann::json::object();
  for (const TensorPiece& p : pieces) {
    tensors.emplace_back(p.name, p.piece.view({p.piece.numel()}));
    where[p.name] = {{"begin", p.begin}, {"shape", p.shape}};
  }
  write_safetensors(path, tensors, {{kPiecesKey, where.dump()}}, &progress);
}

void prune(const std::string& checkpoints_dir, int64_t keep) {
  if (keep <= 0) return;
  const std::vector<CheckpointRef> all = list_train_checkpoints(checkpoints_dir);
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) remove_checkpoint(all[i].dir);
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
  // A NaN or an infinity on any rank: every rank refuses before anything is written.
  std::string nonfinite;
  for (const auto* pieces : {&params, &optimizer})
    for (const TensorPiece& p : *pieces)
      if (nonfinite.empty())
        nonfinite = nonfinite_value(p.name, p.piece, p.begin,
                                    pieces == &params ? "parameter" : "optimizer state", step);
  Tensor refused = control_buffer({1}, DType::I32);
  refused.data<int32_t>()[0] = nonfinite.empty() ? -1 : int32_t(rank);
  comm.all_reduce(refused, ReduceOp::Max, "the checkpoint's finiteness").wait();
  if (!nonfinite.empty()) fail(nonfinite);
  if (const int32_t r = refused.data<int32_t>()[0]; r >= 0)
    fail("refusing to save checkpoint step ", step, ": rank ", r,
         " holds a NaN or an infinity; the previous checkpoints are kept as they are");
  std::error_code ec;
  if (rank == 0) {
    fs::create_directories(checkpoints_dir, ec);
    if (ec) fail("cannot create checkpoint folder '", checkpoints_dir, "': ", ec.message());
    remove_leftovers(checkpoints_dir);
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
    const std::vector<TensorPiece>& pieces = f == 0 ? params : optimizer;
    int64_t bytes = 0;
    for (const TensorPiece& p : pieces) bytes += int64_t(p.piece.nbytes());
    Progress saving("saving " + path, double(bytes), "bytes");
    write_pieces(path, pieces, saving);
    saving.finish();
    if (on_file) on_file(path);
    Progress checking("checksumming " + path, double(file_bytes(path)), "bytes");
    const FileDigest d = digest(path, checking);
    checking.finish();
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
      if (fs::exists(final_dir)) remove_checkpoint(final_dir.string());  // an earlier attempt
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
  Progress checking("checking " + f.st.path(), double(f.bytes), "bytes");
  const FileDigest got = digest(f.st.bytes(), checking);
  checking.finish();
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

std::vector<std::string> CheckpointTensors::names() const {
  std::vector<std::string> out;
  for (const auto& [name, shape] : shapes_) out.push_back(name);
  return out;
}

uint64_t CheckpointTensors::nbytes(const std::string& name) const {
  (void)shape(name);  // fails naming the tensor if absent
  uint64_t n = 0;
  for (const Piece& p : pieces_.at(name)) n += files_[p.file].st.entry(name).nbytes();
  return n;
}

uint64_t CheckpointTensors::data_bytes() const {
  uint64_t n = 0;
  for (const File& f : files_) n += f.st.file_bytes() - f.st.data_offset();
  return n;
}

TrainCheckpoint open_train_checkpoint(const std::string& dir, CheckpointParts parts) {
  const fs::path d(dir);
  const std::string state_path = (d / kState).string();
  if (!fs::exists(state_path)) fail("'", dir, "' is not a checkpoint: it has no ", kState);
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
  TrainCheckpoint c;
  c.ref = {int64_t(step), dir};
  // A sharded checkpoint says how many ranks wrote it; a whole one does not.
  const bool sharded = state.contains("ranks");
  if (sharded) {
    const uint64_t ranks = required(state, "ranks", Kind::Count, state_path).get<uint64_t>();
    if (ranks < 1 || ranks > 99999)
      fail("checkpoint file '", state_path, "': ranks=", ranks,
           " is out of range (1 to 99999); the checkpoint is damaged: remove it to resume from an "
           "earlier one");
    c.ranks = int64_t(ranks);
  }
  for (CheckpointTensors* t : {&c.params, &c.optimizer}) {
    const bool params = t == &c.params;
    if (!params && parts == CheckpointParts::kParams) continue;
    t->dir_ = dir;
    const int64_t n = sharded ? c.ranks : 1;
    for (int64_t r = 0; r < n; ++r) {
      const std::string f = sharded ? shard_file(params ? "params" : "optimizer", r, c.ranks)
                                    : std::string(params ? kParams : kOptimizer);
      const std::string where = "files." + f;
      const nlohmann::json& want = required(files, f, Kind::Object, state_path, "files");
      const uint64_t bytes =
          required(want, "bytes", Kind::Count, state_path, where).get<uint64_t>();
      const uint64_t crc = required(want, "crc32", Kind::Count, state_path, where).get<uint64_t>();
      if (crc > 0xffffffffu)
        fail("checkpoint file '", state_path, "': key '", where, ".crc32' is ", crc,
             ", not a CRC-32; the checkpoint is damaged: remove it to resume from an earlier one");
      if (!fs::exists(d / f)) fail("checkpoint '", dir, "' is missing ", f);
      CheckpointTensors::File file{SafetensorsFile::open((d / f).string()), bytes, uint32_t(crc)};
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
        const auto places = nlohmann::json::parse(meta->second, nullptr, false);
        if (!places.is_object())
          fail("checkpoint '", dir, "': ", f, "'s '", kPiecesKey, "' metadata is not JSON");
        for (const SafetensorsEntry& e : file.st.entries()) {
          const auto p = places.find(e.name);
          if (p == places.end() || !p->is_object() || !p->contains("begin") ||
              !(*p)["begin"].is_number_unsigned() || !p->contains("shape") ||
              !(*p)["shape"].is_array())
            fail("checkpoint '", dir, "': ", f, " does not place its tensor '", e.name, "'");
          Shape shape;
          int64_t numel = 1;  // bounded by 2^48 elements, so that no product overflows
          for (const nlohmann::json& dim : (*p)["shape"]) {
            if (!dim.is_number_unsigned() || dim.get<uint64_t>() > (uint64_t(1) << 48) ||
                (dim.get<int64_t>() > 0 && numel > (int64_t(1) << 48) / dim.get<int64_t>()))
              fail("checkpoint '", dir, "': ", f, " gives '", e.name, "' a bad shape ",
                   excerpt((*p)["shape"]));
            shape.push_back(dim.get<int64_t>());
            numel *= shape.back();
          }
          const int64_t begin = (*p)["begin"].get<int64_t>(), count = shape_numel(e.shape);
          if (begin > shape_numel(shape) || count > shape_numel(shape) - begin)
            fail("checkpoint '", dir, "': ", f, " places ", count, " elements of '", e.name,
                 "' at ", begin, ", outside its shape ", shape_str(shape));
          auto [it, fresh] = t->shapes_.emplace(e.name, shape);
          if (!fresh && it->second != shape)
            fail("checkpoint '", dir, "': '", e.name, "' has shape ", shape_str(shape), " in ", f,
                 " but ", shape_str(it->second), " in another file");
          t->pieces_[e.name].push_back({index, begin, count});
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

TrainCheckpoint open_newest_train_checkpoint(const std::string& path, CheckpointParts parts) {
  // Each retry follows a checkpoint that vanished, which a run rotating every step does at most
  // once per save; a bound keeps a pathological folder from looping.
  for (int attempt = 0;; ++attempt) {
    const CheckpointRef ref = find_train_checkpoint(path);
    try {
      return open_train_checkpoint(ref.dir, parts);
    } catch (const Error&) {
      const bool rotated_away = !fs::exists(fs::path(ref.dir) / kState);
      if (!rotated_away || attempt >= 100 || ref.dir == path) throw;
    }
  }
}

}  // namespace gemmax

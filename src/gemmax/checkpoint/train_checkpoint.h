// Train-state checkpoints: everything a run needs to continue exactly where it stopped.
//
//   <run>/checkpoints/step_00000100/
//     params.safetensors     fp32 master weights under registry names ("layers.0.router.scale")
//     optimizer.safetensors  Adam moments "mu.<name>", "nu.<name>" of the trainable parameters
//     state.json             step, data loader position, resolved config, size and CRC-32 of
//                            each file
//
// A checkpoint is written into step_N.tmp/ (each file written, flushed and renamed by
// AtomicFile, state.json last), then the folder is renamed to step_N and the parent fsynced:
// a crash or a failed write never damages an earlier checkpoint, and a folder without
// state.json is never taken for a checkpoint. Old checkpoints are deleted by renaming them to
// step_N.old/ first. The next save removes the .tmp and .old folders that an interrupted save
// or deletion left.
//
// An FSDP run over N ranks writes the same folder sharded: each rank r writes its own pieces to
//     params.rank<r>-of-<N>.safetensors, optimizer.rank<r>-of-<N>.safetensors
// (flat pieces of the parameters, each file's metadata giving every piece's place in its
// parameter; replicated parameters in rank 0's file only), and once every rank has written, rank 0
// writes state.json (which then has "ranks": N) with the size and CRC-32 of every file and renames
// the folder. A rank that dies while writing leaves only the .tmp folder. Any number of ranks reads
// either form (CheckpointTensors), so a run resumes on a different number of ranks, and
// `gemmax export` turns a sharded checkpoint into a Hugging Face folder.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gemmax/parallel/comm.h"
#include "gemmax/io/safetensors.h"

namespace gemmax {

struct CheckpointRef {
  int64_t step = 0;  // completed training steps
  std::string dir;
};

// Writes step_<step>/ under `checkpoints_dir` (created if missing) and then removes all but
// the newest `keep` complete checkpoints (keep <= 0: keep all). Returns the folder. Refuses
// (throws, writing nothing) parameters or optimizer state holding a NaN or an infinity.
std::string save_train_checkpoint(const std::string& checkpoints_dir, int64_t step,
                                  const NamedTensors& params, const NamedTensors& optimizer,
                                  const nlohmann::json& state, int64_t keep);

// One rank's piece of a tensor: elements [begin, begin + piece.numel()) of the flattened tensor of
// shape `shape`.
struct TensorPiece {
  std::string name;
  Tensor piece;  // host
  int64_t begin = 0;
  Shape shape;
};

// The sharded save: every rank of `comm` calls it with its own pieces at the same step; returns
// the folder on every rank once rank 0 has committed it. A NaN or an infinity in any rank's
// pieces makes every rank refuse (throw) before anything is written. `on_file` (tests: fault
// injection) is called after each file this rank writes.
std::string save_sharded_checkpoint(Comm& comm, const std::string& checkpoints_dir, int64_t step,
                                    const std::vector<TensorPiece>& params,
                                    const std::vector<TensorPiece>& optimizer,
                                    const nlohmann::json& state, int64_t keep,
                                    const std::function<void(const std::string&)>& on_file = {});

// The complete checkpoints (a step_<N> folder with state.json), oldest first. Leftover
// step_<N>.tmp and .old folders of interrupted saves and deletions are ignored.
std::vector<CheckpointRef> list_train_checkpoints(const std::string& checkpoints_dir);

// What a reader needs: resuming needs the moments; eval, export and sample need the weights
// only, and do not look at optimizer files.
enum class CheckpointParts { kAll, kParams };

struct TrainCheckpoint;

// The tensors of a checkpoint's params or optimizer state, whole or sharded over any number of
// files: any element range of any tensor.
class CheckpointTensors {
 public:
  bool has(const std::string& name) const { return shapes_.count(name) > 0; }
  const Shape& shape(const std::string& name) const;  // the whole tensor's
  // Elements [begin, begin + out.numel()) of the flattened tensor, converted to out's dtype.
  void read(const std::string& name, int64_t begin, const Tensor& out) const;
  // The whole tensor, converted.
  Tensor read_as(const std::string& name, DType dtype) const;
  std::vector<std::string> names() const;          // sorted
  uint64_t nbytes(const std::string& name) const;  // as stored, over all its pieces
  uint64_t data_bytes() const;                     // all tensors, as stored

 private:
  friend TrainCheckpoint open_train_checkpoint(const std::string& dir, CheckpointParts parts);
  struct File {
    SafetensorsFile st;
    uint64_t bytes = 0;
    uint32_t crc = 0;
    mutable bool checked = false;  // against bytes and crc, on first read
  };
  struct Piece {
    size_t file;
    int64_t begin, count;
  };
  void check(const File& f) const;
  std::string dir_;
  std::vector<File> files_;
  std::map<std::string, std::vector<Piece>> pieces_;
  std::map<std::string, Shape> shapes_;
};

// An opened checkpoint. Its files are checked against the sizes and CRC-32s in state.json: a whole
// checkpoint's when opened, a sharded one's when a rank first reads from them (a rank reads the few
// files that hold its pieces, and the replicated parameters in rank 0's).
struct TrainCheckpoint {
  CheckpointRef ref;
  nlohmann::json state;  // as saved (without the file table)
  int64_t ranks = 1;     // the ranks that wrote it
  CheckpointTensors params;
  CheckpointTensors optimizer;
};

// `dir` is a step_<N> folder. Throws gemmax::Error naming the file for a missing, truncated or
// corrupted checkpoint. Its files are memory-mapped when opened, so a run that deletes the
// checkpoint afterwards (rotating its checkpoints) does not disturb the reader.
TrainCheckpoint open_train_checkpoint(const std::string& dir,
                                      CheckpointParts parts = CheckpointParts::kAll);

// The newest complete checkpoint under `path` (as find_train_checkpoint), opened. A live run
// may rotate it away between the listing and the opening: then the next newest is taken.
TrainCheckpoint open_newest_train_checkpoint(const std::string& path,
                                             CheckpointParts parts = CheckpointParts::kAll);

// Accepts a step_<N> folder, a checkpoints/ folder or a run folder, and returns the newest
// complete checkpoint it holds. Throws if there is none.
CheckpointRef find_train_checkpoint(const std::string& path);

}  // namespace gemmax

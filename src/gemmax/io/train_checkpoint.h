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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

// The complete checkpoints (a step_<N> folder with state.json), oldest first. Leftover
// step_<N>.tmp and .old folders of interrupted saves and deletions are ignored.
std::vector<CheckpointRef> list_train_checkpoints(const std::string& checkpoints_dir);

// An opened checkpoint whose files were checked against the sizes and CRC-32s in state.json.
struct TrainCheckpoint {
  CheckpointRef ref;
  nlohmann::json state;       // as saved (without the file table)
  SafetensorsFile params;
  SafetensorsFile optimizer;
};

// `dir` is a step_<N> folder. Throws gemmax::Error naming the file for a missing, truncated or
// corrupted checkpoint.
TrainCheckpoint open_train_checkpoint(const std::string& dir);

// Accepts a step_<N> folder, a checkpoints/ folder or a run folder, and returns the newest
// complete checkpoint it holds. Throws if there is none.
CheckpointRef find_train_checkpoint(const std::string& path);

}  // namespace gemmax

// Outputs never clobber inputs: every command checks the paths it will write against the paths
// it reads before it reads or writes anything large.
//
// Paths are compared as the files they resolve to: symlinks (of the path or of any folder on
// the way) are followed, and existing files are compared by identity, so a hard link or a
// bind mount of an input is caught too.
#pragma once

#include <string>
#include <vector>

namespace gemmax {

struct PathRole {
  std::string path;
  std::string name;  // how the user gave it, for the error: "--out", "dataset_path", ...
  // Outputs only: a folder the command writes into and may delete files from (a checkpoint
  // folder, a Hugging Face folder): no input may lie inside it either.
  bool folder = false;
};

// Throws gemmax::Error naming both paths when an output resolves to an input, lies inside an
// input folder (a model folder, a data folder), or (a folder output) holds an input; or when two
// outputs resolve to the same file. Empty paths are skipped.
void refuse_outputs_over_inputs(const std::vector<PathRole>& outputs,
                                const std::vector<PathRole>& inputs);

}  // namespace gemmax

// What a training run writes, checked against what it reads (io/no_clobber.h).
#pragma once

#include <string>

#include "gemmax/config/train_config.h"

namespace gemmax {

// Throws gemmax::Error when a file or folder the run writes under `run_dir` (config.yml,
// metrics.jsonl, memory.json, the lock, checkpoints/, the TensorBoard folder) resolves to one of
// its inputs (dataset_path, eval_dataset_path, hf_path and the files of its splits,
// tokenizer_path and the files beside a tokenizer file, chat_template_path,
// load_parameters_path), lies inside an input folder,
// or holds an input in a folder the run prunes. The config file a run was started from may be
// its own run_dir/config.yml (`gemmax train out/RUN/config.yml` repeats a run): it has been read
// whole, and the run writes back the same resolved config.
void refuse_run_outputs_over_inputs(const TrainConfig& config, const std::string& run_dir);

}  // namespace gemmax

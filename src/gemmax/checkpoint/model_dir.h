// A model's shape and weights from a folder on disk, whatever kind of folder it is. This is
// the one place that tells the kinds apart, so that every command taking a model accepts them
// all: a Hugging Face folder (config.json + safetensors), or a gemmax train checkpoint
// (a step_N folder, a checkpoints/ folder or a run folder: its newest checkpoint).
#pragma once

#include <string>

#include "gemmax/base/tensor.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/config/model_config.h"

namespace gemmax {

struct LoadedModel {
  ModelConfig config;
  Tensor weights;      // host, flat, laid out by ParamTable(config), in the requested dtype
  std::string source;  // what was read, for logs: "Hugging Face folder 'DIR'"
  std::string note;    // what was left out (vision-tower tensors), or ""
  CheckpointRef checkpoint;  // the train checkpoint read (dir empty: a Hugging Face folder)
};

// Throws gemmax::Error naming the folder and what is wrong with it. A train checkpoint's weights
// are read without its optimizer files, from the newest checkpoint that a live run has not
// rotated away.
LoadedModel load_model_dir(const std::string& dir, DType dtype);

}  // namespace gemmax

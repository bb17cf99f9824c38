// A model's shape and weights from a folder on disk, whatever kind of folder it is. This is
// the one place that tells the kinds apart: today a Hugging Face folder (config.json +
// safetensors); a gemmax train checkpoint folder is to be recognised here too, so that every
// command taking --model accepts both.
#pragma once

#include <iosfwd>
#include <string>

#include "gemmax/base/tensor.h"
#include "gemmax/config/model_config.h"

namespace gemmax {

struct LoadedModel {
  ModelConfig config;
  Tensor weights;      // host, flat, laid out by ParamTable(config), in the requested dtype
  std::string source;  // what was read, for logs: "Hugging Face folder 'DIR'"
};

// Throws gemmax::Error naming the folder and what is wrong with it. Notes (skipped tensors)
// go to `log` when it is not null.
LoadedModel load_model_dir(const std::string& dir, DType dtype, std::ostream* log);

}  // namespace gemmax

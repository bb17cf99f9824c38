// A model's shape and weights from a folder on disk, whatever kind of folder it is. This is
// the one place that tells the kinds apart, so that every command taking a model accepts them
// all: a Hugging Face folder (config.json + safetensors), or a gemmax train checkpoint
// (a step_N folder, a checkpoints/ folder or a run folder: its newest checkpoint).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gemmax/base/tensor.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/config/model_config.h"
#include "gemmax/model/lora/adapters.h"

namespace gemmax {

// LoRA adapters on a loaded model (model/lora/): a LoRA run's checkpoint's, or a PEFT folder's.
struct LoadedAdapters {
  std::vector<LoraTarget> targets;
  LoraShape shape;
  Tensor weights;      // host, laid out like AdapterTable(table, targets, shape).params()
  std::string source;  // for logs
};

struct LoadedModel {
  ModelConfig config;
  Tensor weights;      // host, flat, laid out by ParamTable(config), in the requested dtype
  std::string source;  // what was read, for logs: "Hugging Face folder 'DIR'"
  std::string note;    // what was left out (vision-tower tensors), or ""
  CheckpointRef checkpoint;  // the train checkpoint read (dir empty: a Hugging Face folder)
  // With adapters the weights are their frozen base (a LoRA run's checkpoint, or --adapter).
  std::optional<LoadedAdapters> lora;
  std::string hf_prefix = "model.";  // the base's tensor prefix in its Hugging Face folder
  std::string base_source;           // a LoRA checkpoint's base: its load_parameters_path
};

// Throws gemmax::Error naming the folder and what is wrong with it. A train checkpoint's weights
// are read without its optimizer files, from the newest checkpoint that a live run has not
// rotated away. A LoRA run's checkpoint gives its frozen base (read from the run's
// load_parameters_path, or initialised from its seed, and checked to be the base the adapters
// were trained on) with its adapters beside it.
LoadedModel load_model_dir(const std::string& dir, DType dtype);

// Puts the PEFT adapter folder `adapter` on `m` (--adapter, hf_lora_adapter_path), checked against
// its model; an error if `m` holds adapters already (a LoRA run's checkpoint).
void attach_peft_adapter(LoadedModel& m, const std::string& adapter);

// The model's weights with its adapters folded in (PEFT's merge_and_unload); the weights alone
// without adapters.
Tensor merged_weights(const LoadedModel& m);

}  // namespace gemmax

// A Hugging Face Gemma-4 model folder (config.json + safetensors) mapped onto gemmax's
// parameter registry. This is the one place where HF tensor names and layouts meet the
// registry: gemmax names are the HF names without their prefix, and every layout (including
// experts.gate_up_proj [E, 2F, D] with the gate rows first and experts.down_proj [E, D, F])
// is stored exactly as HF stores it, so loading and saving copy bytes (and convert dtypes).
#pragma once

#include <functional>
#include <string>

#include "gemmax/io/hf_config.h"
#include "gemmax/io/safetensors.h"
#include "gemmax/model/params.h"

namespace gemmax {

struct HfModelFolder {
  std::string dir;
  ModelConfig config;
  HfConfigInfo info;  // prefix of the text decoder's tensors, dtype
};

// Reads dir/config.json.
HfModelFolder read_hf_model_folder(const std::string& dir);

// Gives `take` each parameter's tensor from the folder, in registry order, converted to `dtype`
// (one tensor at a time: no whole copy of the model). Checks as load_hf_weights does; returns its
// note.
std::string for_each_hf_weight(const ParamTable& table, const HfModelFolder& folder, DType dtype,
                               const std::function<void(const ParamSpec&, const Tensor&)>& take);

// Fills `flat` (laid out by `table`) from the folder's tensors, converting dtypes. Every
// parameter must be present with its exact shape; a tensor under the decoder prefix that the
// registry does not know is an error (never silently dropped). Tensors outside the prefix
// (vision / audio towers of a multimodal checkpoint) are skipped; the returned note says so
// ("" when nothing was skipped).
std::string load_hf_weights(const ParamTable& table, const HfModelFolder& folder,
                            const Tensor& flat);

// Each parameter of `flat` as (prefix + name, tensor converted to `dtype`), in registry order.
NamedTensors hf_named_tensors(const ParamTable& table, const Tensor& flat,
                              const std::string& prefix, DType dtype);

}  // namespace gemmax

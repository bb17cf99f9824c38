// Gemma-4 `config.json` (Hugging Face transformers) <-> gemmax::ModelConfig.
//
// Two forms are read: the text-only one (model_type "gemma4_text", Gemma4ForCausalLM) and the
// released multimodal one (model_type "gemma4", Gemma4ForConditionalGeneration) whose decoder
// is the nested "text_config". Keys are interpreted as transformers does (configuration_gemma4.py
// Gemma4TextConfig, modeling_gemma4.py); a key that would make transformers build a model gemmax
// does not implement (per-layer inputs, KV sharing, biases, no MoE block, another activation,
// untied embeddings, ...) is an error naming the key and its value, never silently dropped.
#pragma once

#include <string>
#include <string_view>

#include "gemmax/base/dtype.h"
#include "gemmax/config/model_config.h"

namespace gemmax {

// What a config.json says besides the model shape.
struct HfConfigInfo {
  bool multimodal = false;    // model_type "gemma4": weights live under model.language_model.
  std::string weight_prefix;  // "model.language_model." or "model."
  bool has_dtype = false;     // "dtype" / "torch_dtype" present and known
  DType dtype = DType::F32;
};

// Reads `path` (a config.json). Throws gemmax::Error naming the file and the key: missing
// required keys, wrong types, unsupported features. Any layer_types list is taken, with its
// last layer full attention as transformers makes it. The config's `name` is the name of the
// folder holding the file.
ModelConfig read_hf_config(const std::string& path, HfConfigInfo* info = nullptr);
// The same from JSON text; `origin` names the source in error messages.
ModelConfig parse_hf_config(std::string_view json_text, const std::string& origin,
                            HfConfigInfo* info = nullptr);

// Why transformers could not hold this model (a sliding last layer, an MoE router that does not
// renormalise, global KV heads that differ without K = V), or "": every shape
// hf_config_json refuses, so that a run refuses it before it trains.
std::string hf_export_refusal(const ModelConfig& c);

// The text-only Gemma4ForCausalLM config.json for `cfg`, with weights stored as `dtype`, such
// that transformers' AutoModelForCausalLM.from_pretrained builds exactly this model. Throws if
// `cfg` cannot be expressed (e.g. norm_topk_prob false, or a layer count that is not a whole
// number of periods, since transformers forces the last layer to full attention).
std::string hf_config_json(const ModelConfig& cfg, DType dtype);
// Writes hf_config_json to `path` atomically.
void write_hf_config(const ModelConfig& cfg, DType dtype, const std::string& path);

}  // namespace gemmax

// Hugging Face PEFT's LoRA adapter folder (docs/LORA.md), as PEFT 0.21 writes and reads it:
//   adapter_config.json        LoraConfig's fields: peft_type LORA, r, lora_alpha, use_rslora,
//                              target_modules, target_parameters, base_model_name_or_path, ...
//   adapter_model.safetensors  "base_model.model.<module>.lora_A.weight" and ".lora_B.weight",
//                              fp32, metadata {"format": "pt"}
// <module> is the adapted module's name in transformers' Gemma-4 ("model.layers.3.self_attn.
// q_proj"; "model.language_model.layers.3..." in the multimodal class). The experts' 3-D weights
// carry PEFT's ParamWrapper adapters: lora_A.weight [E r, in] holds expert e's A in rows
// [e r, (e+1) r), lora_B.weight [out, r E] expert e's B in columns e, E + e, 2E + e, ...; with
// both of a layer's expert parameters targeted, PEFT nests the wrappers in the order the
// parameters are declared, gate_up_proj's under "experts.base_layer" and down_proj's under
// "experts".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gemmax/base/named_tensors.h"
#include "gemmax/base/tensor.h"
#include "gemmax/model/lora/adapters.h"

namespace gemmax {

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";

struct PeftAdapter {
  std::string dir;
  nlohmann::json config;            // adapter_config.json as read
  LoraShape shape;                  // r, lora_alpha, use_rslora, lora_dropout
  std::vector<LoraTarget> targets;  // the base's matrices its tensors adapt, in registry order
  Tensor weights;          // host, laid out like AdapterTable(base, targets, shape).params()
  std::string base_model;  // base_model_name_or_path
};

// Whether `dir` holds an adapter (its adapter_config.json).
bool is_peft_adapter(const std::string& dir);

// Reads an adapter folder against the frozen model `base`, converting to `dtype`. Throws
// gemmax::Error naming the file and the field or tensor for: no adapter there, another kind of
// PEFT adapter or a LoRA option gemmax does not have (DoRA, rank_pattern, bias, modules_to_save,
// ...), a tensor that adapts no matrix of the base, a shape that does not fit the base's matrix
// or the config's r (an adapter of another model or rank).
PeftAdapter read_peft_adapter(const std::string& dir, const ParamTable& base, DType dtype);

// Writes `dir` (created if missing; each file atomically): `weights` (host, laid out like
// adapters.params()) under PEFT's names, with the config PEFT writes. `prefix` is the base's
// tensor prefix in its Hugging Face folder ("model." or "model.language_model."); `base_model`
// is base_model_name_or_path.
void write_peft_adapter(const std::string& dir, const AdapterTable& adapters, const Tensor& weights,
                        const std::string& base_model, const std::string& prefix);

// The adapters (or their gradients: the layouts are linear) as PEFT names and lays them out, fp32
// or `dtype`: what write_peft_adapter writes.
NamedTensors peft_named_tensors(const AdapterTable& adapters, const Tensor& weights,
                                const std::string& prefix, DType dtype = DType::F32);

// The adapted weights W + s B A of every target, folded into `base` (host, flat, laid out like
// the base registry): what PEFT's merge_and_unload computes, in fp64 and rounded once to base's
// dtype.
void merge_adapters(const AdapterTable& adapters, const Tensor& adapter_weights,
                    const Tensor& base);

}  // namespace gemmax

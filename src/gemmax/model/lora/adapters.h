// The LoRA adapters of a run (docs/LORA.md): which matrices of the frozen base carry one, and the
// adapters' own parameter registry.
//
// A target is chosen as MaxText chooses it, by a regex searched in each matrix's MaxText path
// (lora_module_path; its default is the gemma4 entry of MaxText's configs/post_train/
// lora_module_path.yml), or as Hugging Face PEFT does, by module names (target_modules, matched as
// a name or a dotted suffix, or all-linear) and the experts' 3-D parameters (target_parameters).
// Every target has an A [r, in] and a B [out, r]; the experts' weights one per expert, A [E, r,
// in] and B [E, out, r], which is PEFT's ParamWrapper on Gemma-4's fused expert tensors.
//
// The adapters are a ParamTable of their own (A then B of each target, in the base registry's
// order), so that the optimizer, the checkpoints and the gradient norm treat them as they treat
// any parameters; under FSDP they are replicated and their gradients all-reduced.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gemmax/config/choices.h"
#include "gemmax/model/params.h"
#include "gemmax/model/weights.h"

namespace gemmax {

// The matrices an adapter can sit on.
enum class LoraSite : uint8_t {
  QProj,
  KProj,
  VProj,
  OProj,  // attention
  MlpGate,
  MlpUp,
  MlpDown,  // the dense MLP (the MoE layer's shared expert)
  RouterProj,
  ExpertsGateUp,
  ExpertsDown,
  PliGate,
  PliProj,    // the small block's per-layer input, in each layer
  ModelProj,  // the small block's per_layer_model_projection
};

struct LoraTarget {
  LoraSite site;
  int64_t layer = -1;     // -1: the model-level per_layer_model_projection
  std::string weight;     // the frozen matrix's registry name
  std::string module;     // its Hugging Face module ("layers.3.self_attn.q_proj";
                          // the experts' is "layers.3.experts")
  std::string parameter;  // the experts': the 3-D parameter (gate_up_proj, down_proj); else ""
  std::vector<std::string> maxtext_paths;  // MaxText's (gate_up: wi_0 and wi_1)
  int64_t experts = 1, in = 0, out = 0;
  std::string a_name, b_name;  // the adapter registry's names of A and B
};

// How targets are chosen: lora_module_path, or PEFT's target_modules / target_parameters.
struct LoraTargeting {
  std::string module_path;                     // MaxText's regex ("": its gemma4 default)
  std::vector<std::string> target_modules;     // PEFT's names, or {"all-linear"}
  std::vector<std::string> target_parameters;  // PEFT's experts' parameters
  bool peft() const { return !target_modules.empty() || !target_parameters.empty(); }
};

struct LoraShape {
  int64_t rank = 0;
  double alpha = 0;
  bool rslora = false;
  double dropout = 0;
  double scale() const;  // alpha / r, or alpha / sqrt(r)
};

// A LoRA run's settings: enable_lora and the keys beside it (config/keys.h).
struct LoraOptions {
  LoraTargeting targeting;
  std::vector<LoraTarget> targets;  // the targets of an adapter read from disk (else chosen by
                                    // `targeting`)
  LoraShape shape;
  LoraWeightQtype qtype = LoraWeightQtype::None;  // QLoRA: nf4
  int64_t nf4_block = 64;                         // lora_tile_size
};

// MaxText's gemma4 entry of lora_module_path.yml, as MaxText 0.2.5 rewrites its layer part.
extern const char* const kMaxTextGemma4ModulePath;

// A training step's dropout: the seed its masks derive from, and the index in the global batch
// of this rank's first token. Element (token, j) of an adapter's input is dropped by its global
// index, so N ranks drop what one rank drops for the same rows (LoRA's FSDP runs).
struct DropoutStep {
  uint64_t seed = 0;
  int64_t first_token = 0;
};

class AdapterTable {
 public:
  // Throws gemmax::Error naming the key for a rank that is not positive or exceeds a matrix's
  // sides, a selection that matches nothing (with the nearest paths or names) or only half of the
  // experts' fused gate_up.
  AdapterTable(const ParamTable& base, const LoraTargeting& targeting, const LoraShape& shape);
  // The adapters of exactly these targets (a PEFT adapter's, read from its files).
  AdapterTable(const ParamTable& base, std::vector<LoraTarget> targets, const LoraShape& shape);
  // From a run's options: its explicit targets, else its targeting.
  AdapterTable(const ParamTable& base, const LoraOptions& options)
      : AdapterTable(options.targets.empty() ? AdapterTable(base, options.targeting, options.shape)
                                             : AdapterTable(base, options.targets, options.shape)) {
  }

  const ParamTable& params() const { return params_; }
  const ParamTable& base() const { return *base_; }  // the frozen model's registry
  const std::vector<LoraTarget>& targets() const { return targets_; }
  const LoraShape& shape() const { return shape_; }

  // Views of layer l's adapters (of the model projection's) in a flat buffer laid out like
  // params(), their scale filled in. A training step passes its dropout seed (each target's masks
  // derive from it); without one (evaluation, decoding) there is no dropout.
  LayerAdapters bind_layer(const Tensor& flat, int64_t layer,
                           std::optional<DropoutStep> dropout_seed = std::nullopt) const;
  LoraPair bind_model_proj(const Tensor& flat,
                           std::optional<DropoutStep> dropout_seed = std::nullopt) const;

  // Every matrix an adapter could sit on, with its MaxText paths and Hugging Face names.
  static std::vector<LoraTarget> candidates(const ParamTable& base);

 private:
  void build();
  LoraPair pair(const Tensor& flat, const LoraTarget& t, std::optional<DropoutStep> seed) const;

  const ParamTable* base_;
  std::vector<LoraTarget> targets_;
  LoraShape shape_;
  ParamTable params_;
};

}  // namespace gemmax

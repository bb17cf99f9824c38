// Named views of one layer's (or the whole model's) parameters inside a flat buffer.
// The same struct binds the weights, their gradients, or a compute-dtype copy.
#pragma once

#include <functional>
#include <vector>

#include "gemmax/backend/backend.h"
#include "gemmax/base/tensor.h"
#include "gemmax/model/params.h"

namespace gemmax {

// A LoRA adapter on one matrix W [out, in] of a frozen base (model/lora/, docs/LORA.md):
//   y = x . W^T + scale * (drop(x) . A^T) . B^T,
// A [r, in], B [out, r]; on the experts' grouped weights one adapter per expert, A [E, r, in] and
// B [E, out, r]. Undefined `a`: no adapter. The same struct binds the adapter's gradients, whose
// scale and dropout are unused.
struct LoraPair {
  Tensor a, b;
  double scale = 0;
  double dropout = 0;         // PEFT's lora_dropout on the adapter's input; 0: none
  uint64_t dropout_seed = 0;  // the mask of this matrix in this step (Backend::dropout)
  bool defined() const { return a.defined(); }
};

// The adapters of one decoder layer, one per matrix (undefined where none).
struct LayerAdapters {
  LoraPair q_proj, k_proj, v_proj, o_proj;
  LoraPair mlp_gate, mlp_up, mlp_down;  // gate_proj and up_proj: rows of the fused mlp_gate_up
  LoraPair router_proj, experts_gate_up, experts_down;
  LoraPair pli_gate, pli_proj;
  bool mlp_split() const { return mlp_gate.defined() || mlp_up.defined(); }
};

struct LayerWeights {
  // attention block
  Tensor input_norm;      // [D]
  Tensor q_proj;          // [H*hd, D]
  Tensor k_proj;          // [KV*hd, D]
  Tensor v_proj;          // [KV*hd, D]; undefined on K = V layers
  Tensor o_proj;          // [D, H*hd]
  Tensor q_norm, k_norm;  // [hd]
  Tensor post_attn_norm;  // [D]
  // dense MLP
  Tensor pre_mlp_norm;   // [D]
  Tensor mlp_gate_up;    // [2*Fs, D]: gate_proj rows, then up_proj rows (adjacent in the buffer)
  Tensor mlp_down;       // [D, Fs]
  Tensor post_mlp_norm;  // [D] post_feedforward_layernorm_1
  // routed MoE
  Tensor router_proj;          // [E, D]
  Tensor router_scale;         // [D]
  Tensor router_expert_scale;  // [E] per_expert_scale
  Tensor pre_moe_norm;         // [D] pre_feedforward_layernorm_2
  Tensor experts_gate_up;      // [E, 2F, D]
  Tensor experts_down;         // [E, D, F]
  Tensor post_moe_norm;        // [D] post_feedforward_layernorm_2
  // output
  Tensor post_ffw_norm;  // [D] post_feedforward_layernorm (on dense + MoE)
  // the small block's per-layer input (model/per_layer_inputs.h)
  Tensor pli_gate;       // [P, D] per_layer_input_gate
  Tensor pli_proj;       // [D, P] per_layer_projection
  Tensor pli_post_norm;  // [D] post_per_layer_input_norm
  Tensor layer_scalar;   // [1]
  LayerAdapters lora;    // a LoRA run's adapters
};

// The small block's model-level per-layer-input weights (undefined without them).
struct PerLayerInputWeights {
  Tensor table;              // [V, L*P] embed_tokens_per_layer
  Tensor model_proj;         // [L*P, D] per_layer_model_projection
  Tensor proj_norm;          // [P] per_layer_projection_norm
  LoraPair model_proj_lora;  // a LoRA run's adapter on model_proj
};

struct ModelWeights {
  Tensor embed;       // [V, D], tied with the output head
  Tensor final_norm;  // [D]
  PerLayerInputWeights per_layer;
  std::vector<LayerWeights> layers;
};

// Where a parameter's elements start: element `offset` of `buffer`.
struct ParamLocation {
  Tensor buffer;
  int64_t offset = 0;
};
using ParamLocator = std::function<ParamLocation(const ParamSpec&)>;

// Views of a layer's parameters wherever `locate` puts them (mlp.gate_proj and mlp.up_proj must be
// adjacent in one buffer: they form the fused gate_up matrix).
LayerWeights bind_layer(const ParamTable& table, int64_t layer, const ParamLocator& locate);
// Views into a flat buffer laid out like the registry.
LayerWeights bind_layer(const ParamTable& table, const Tensor& flat, int64_t layer);
ModelWeights bind_model(const ParamTable& table, const Tensor& flat);

// A compute-dtype copy of a master weight (MemKind::Workspace: it lives while its holder does),
// or the master itself when the dtypes agree.
Tensor compute_copy(Backend& be, const Tensor& master, DType act);

// The weights a layer computes with. With bf16 activations and fp32 master weights the
// matrices are cast to bf16 copies that exist only while the layer runs, as MaxText casts each
// layer's fp32 weights to bf16; norm scales, router scales and layer_scalar stay the fp32
// masters, multiplied in fp32 before the one rounding of their output (seed change 2, norm scales
// in fp32: docs/SEED.md#each-change). With equal dtypes: the master weights themselves.
// fp32_router (float32_gate_logits): the router's matrix in fp32 (the master itself, or a widened
// copy of a LoRA run's frozen bf16 base).
LayerWeights compute_weights(Backend& be, const LayerWeights& master, DType act,
                             bool fp32_router = false);

}  // namespace gemmax

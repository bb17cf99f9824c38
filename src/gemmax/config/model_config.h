// The shape of a Gemma-4 text decoder: the model keys of keys.h, and what follows from them.
#pragma once

#include <cstdint>
#include <string>

#include "gemmax/config/choices.h"
#include "gemmax/config/keys.h"

namespace gemmax {

// The model's keys (keys.h, GEMMAX_MODEL_KEYS) with their defaults; the preset fills them.
struct ModelConfig {
  GEMMAX_MODEL_KEYS(GEMMAX_KEY_FIELD)

  // Layer l attends globally: as layer_types lists it, else by the periodic pattern.
  bool is_global(int64_t layer) const;
  int64_t layer_kv_heads(int64_t layer) const {
    return is_global(layer) ? global_num_kv_heads : num_kv_heads;
  }
  int64_t layer_head_dim(int64_t layer) const {
    return is_global(layer) ? global_head_dim : head_dim;
  }
  // Global layers with K = V have no v projection.
  bool layer_has_v_proj(int64_t layer) const { return !(is_global(layer) && share_kv_projections); }
  int64_t num_global_layers() const;
  // MaxText's num_experts=1 (HF enable_moe_block=false) is the dense layer of gemma4-31b: the
  // GeGLU MLP alone between pre_ and post_feedforward_layernorm, no router and no experts.
  bool has_moe() const { return num_experts > 1; }
  bool has_per_layer_inputs() const { return per_layer_input_dim > 0; }
  // Layer l has no k/v projections or norms: it attends with kv_donor(l)'s normed, rotated K/V.
  bool kv_shared(int64_t layer) const {
    return num_kv_shared_layers > 0 && layer >= num_layers - num_kv_shared_layers;
  }
  // The last layer of the same kind (sliding or global) before the first sharing layer, or -1.
  int64_t kv_donor(int64_t layer) const;
  // The dense MLP's width in layer l (twice base_mlp_dim in the sharing layers with
  // use_double_wide_mlp).
  int64_t layer_mlp_dim(int64_t layer) const {
    return double_wide_mlp && kv_shared(layer) ? 2 * mlp_dim : mlp_dim;
  }

  // Throws gemmax::Error naming the first inconsistent field.
  void validate() const;
  // "" if both describe the same network; else the first differing field, both values, named
  // by its MaxText key ("base_emb_dim: 128 vs 256"). The name and the loss weights are ignored.
  std::string shape_difference(const ModelConfig& other) const;
};

}  // namespace gemmax

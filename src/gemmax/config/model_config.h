// The shape of a Gemma-4 text decoder. Field comments give the MaxText config key and the
// Hugging Face config.json key.
#pragma once

#include <cstdint>
#include <string>

namespace gemmax {

// How a run that starts from scratch draws its weights (docs/MODEL.md §4.9).
enum class InitScheme {
  MaxText,  // MaxText's variance scaling per kind of kernel (fan-in, normal or truncated)
  Hf,       // Hugging Face: every matrix from N(0, initializer_range²)
};
// Throws gemmax::Error naming the key, the value and the valid names.
InitScheme parse_init_scheme(const std::string& name);

// What the load-balance loss's expert density counts (docs/TRAINING.md §7).
enum class LoadBalanceDensity {
  PerToken,   // the fraction of a sequence's tokens that chose the expert (sums to K)
  PerChoice,  // the fraction of its K choices per token (sums to 1): MaxText 0.2.5's, 1/K of it
};
LoadBalanceDensity parse_load_balance_density(const std::string& name);

struct ModelConfig {
  std::string name;                     // model_name
  int64_t vocab_size = 0;               // vocab_size / vocab_size
  int64_t d_model = 0;                  // base_emb_dim / hidden_size
  int64_t num_layers = 0;               // base_num_decoder_layers / num_hidden_layers
  int64_t num_heads = 0;                // base_num_query_heads / num_attention_heads
  int64_t num_kv_heads = 0;             // base_num_kv_heads / num_key_value_heads (sliding layers)
  int64_t head_dim = 0;                 // head_dim / head_dim (sliding layers)
  int64_t global_num_kv_heads = 0;      // global_num_kv_heads / num_global_key_value_heads
  int64_t global_head_dim = 0;          // global_head_dim / global_head_dim
  int64_t mlp_dim = 0;                  // base_mlp_dim / intermediate_size (dense GeGLU)
  int64_t moe_mlp_dim = 0;              // base_moe_mlp_dim / moe_intermediate_size
  int64_t num_experts = 0;              // num_experts / num_experts (1: dense, no MoE block)
  int64_t num_experts_per_tok = 0;      // num_experts_per_tok / top_k_experts
  int64_t sliding_window = 0;           // sliding_window_size / sliding_window
  int64_t sliding_window_pattern = 6;   // layer l is global iff l % pattern == pattern - 1
  double local_rope_theta = 1e4;        // local_rope_max_timescale
  double global_rope_theta = 1e6;       // global_rope_max_timescale
  double local_rope_proportion = 1.0;   // local_rope_proportion
  double global_rope_proportion = 0.25;  // global_rope_proportion (HF partial_rotary_factor)
  bool share_kv_projections = true;     // share_kv_projections / attention_k_eq_v (global layers)
  double final_logits_soft_cap = 30.0;  // final_logits_soft_cap / final_logit_softcapping (0: off)
  double norm_eps = 1e-6;               // normalization_layer_epsilon / rms_norm_eps
  bool norm_topk_prob = true;           // norm_topk_prob
  double load_balance_loss_weight = 0.001;  // load_balance_loss_weight
  LoadBalanceDensity load_balance_density = LoadBalanceDensity::PerToken;  // load_balance_density
  double initializer_range = 0.02;      // initializer_range (HF): std of init_scheme=hf's normal
  InitScheme init_scheme = InitScheme::MaxText;  // init_scheme
  double dense_init_scale = 1.0;        // dense_init_scale (MaxText): variance scale of the MoE
                                        // block's kernels (dense MLP, router, experts)
  // The small block (gemma4-e2b/e4b, MaxText's gemma4_small; docs/MODEL.md §3.2).
  int64_t per_layer_input_dim = 0;  // hidden_size_per_layer_input (both; 0: none)
  int64_t per_layer_vocab = 0;      // vocab_size_per_layer_input (both): the table's rows
  int64_t num_kv_shared_layers = 0;  // num_kv_shared_layers (both): the last layers reuse K/V
  bool double_wide_mlp = false;      // use_double_wide_mlp (both): those layers' MLP is 2x wide

  bool is_global(int64_t layer) const {
    return sliding_window_pattern > 0 && layer % sliding_window_pattern == sliding_window_pattern - 1;
  }
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

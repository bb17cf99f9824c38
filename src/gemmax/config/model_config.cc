#include "gemmax/config/model_config.h"

#include "gemmax/base/error.h"

namespace gemmax {

int64_t ModelConfig::num_global_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += is_global(l);
  return n;
}

void ModelConfig::validate() const {
  auto positive = [&](int64_t v, const char* key) {
    if (v <= 0) fail("model '", name, "': ", key, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(d_model, "base_emb_dim");
  positive(num_layers, "base_num_decoder_layers");
  positive(num_heads, "base_num_query_heads");
  positive(num_kv_heads, "base_num_kv_heads");
  positive(head_dim, "head_dim");
  positive(global_num_kv_heads, "global_num_kv_heads");
  positive(global_head_dim, "global_head_dim");
  positive(mlp_dim, "base_mlp_dim");
  positive(moe_mlp_dim, "base_moe_mlp_dim");
  positive(num_experts, "num_experts");
  positive(num_experts_per_tok, "num_experts_per_tok");
  positive(sliding_window, "sliding_window_size");
  if (num_experts_per_tok > num_experts)
    fail("model '", name, "': num_experts_per_tok (", num_experts_per_tok,
         ") cannot exceed num_experts (", num_experts, ")");
  if (num_heads % num_kv_heads != 0)
    fail("model '", name, "': base_num_query_heads (", num_heads,
         ") must be a multiple of base_num_kv_heads (", num_kv_heads, ")");
  if (num_heads % global_num_kv_heads != 0)
    fail("model '", name, "': base_num_query_heads (", num_heads,
         ") must be a multiple of global_num_kv_heads (", global_num_kv_heads, ")");
  if (head_dim % 2 != 0 || global_head_dim % 2 != 0)
    fail("model '", name, "': head_dim and global_head_dim must be even for RoPE, got ", head_dim,
         " and ", global_head_dim);
  if (sliding_window_pattern < 0)
    fail("model '", name, "': sliding_window_pattern must be >= 0 (0: no global layers), got ",
         sliding_window_pattern);
  for (double p : {local_rope_proportion, global_rope_proportion})
    if (p < 0 || p > 1)
      fail("model '", name, "': rope proportions must lie in [0, 1], got ", p);
}

std::string ModelConfig::shape_difference(const ModelConfig& o) const {
  auto diff = [](const char* key, auto a, auto b) -> std::string {
    return a == b ? std::string() : str_cat(key, ": ", a, " vs ", b);
  };
  for (const std::string& d : {
           diff("vocab_size", vocab_size, o.vocab_size),
           diff("base_emb_dim", d_model, o.d_model),
           diff("base_num_decoder_layers", num_layers, o.num_layers),
           diff("base_num_query_heads", num_heads, o.num_heads),
           diff("base_num_kv_heads", num_kv_heads, o.num_kv_heads),
           diff("head_dim", head_dim, o.head_dim),
           diff("global_num_kv_heads", global_num_kv_heads, o.global_num_kv_heads),
           diff("global_head_dim", global_head_dim, o.global_head_dim),
           diff("base_mlp_dim", mlp_dim, o.mlp_dim),
           diff("base_moe_mlp_dim", moe_mlp_dim, o.moe_mlp_dim),
           diff("num_experts", num_experts, o.num_experts),
           diff("num_experts_per_tok", num_experts_per_tok, o.num_experts_per_tok),
           diff("sliding_window_size", sliding_window, o.sliding_window),
           diff("sliding_window_pattern", sliding_window_pattern, o.sliding_window_pattern),
           diff("local_rope_max_timescale", local_rope_theta, o.local_rope_theta),
           diff("global_rope_max_timescale", global_rope_theta, o.global_rope_theta),
           diff("local_rope_proportion", local_rope_proportion, o.local_rope_proportion),
           diff("global_rope_proportion", global_rope_proportion, o.global_rope_proportion),
           diff("share_kv_projections", share_kv_projections, o.share_kv_projections),
           diff("final_logits_soft_cap", final_logits_soft_cap, o.final_logits_soft_cap),
           diff("normalization_layer_epsilon", norm_eps, o.norm_eps),
           diff("norm_topk_prob", norm_topk_prob, o.norm_topk_prob)})
    if (!d.empty()) return d;
  return "";
}

}  // namespace gemmax

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

}  // namespace gemmax

#include "gemmax/config/run_config.h"

#include <sstream>

#include "gemmax/base/error.h"

namespace gemmax {

std::string maxtext_model_keys(const ModelConfig& m) {
  std::ostringstream os;
  os.precision(17);
  os << "model_name=" << m.name << " base_num_decoder_layers=" << m.num_layers
     << " base_emb_dim=" << m.d_model << " base_num_query_heads=" << m.num_heads
     << " base_num_kv_heads=" << m.num_kv_heads << " head_dim=" << m.head_dim
     << " global_num_kv_heads=" << m.global_num_kv_heads << " global_head_dim=" << m.global_head_dim
     << " base_mlp_dim=" << m.mlp_dim;
  if (m.has_moe()) os << " base_moe_mlp_dim=" << m.moe_mlp_dim;  // the dense layer reads none
  os << " num_experts=" << m.num_experts << " num_experts_per_tok=" << m.num_experts_per_tok
     << " vocab_size=" << m.vocab_size << " sliding_window_size=" << m.sliding_window
     << " local_rope_max_timescale=" << m.local_rope_theta
     << " global_rope_max_timescale=" << m.global_rope_theta
     << " local_rope_proportion=" << m.local_rope_proportion
     << " global_rope_proportion=" << m.global_rope_proportion
     << " share_kv_projections=" << (m.share_kv_projections ? "true" : "false")
     << " final_logits_soft_cap=" << m.final_logits_soft_cap
     << " normalization_layer_epsilon=" << m.norm_eps;
  if (m.has_per_layer_inputs() || m.num_kv_shared_layers > 0)
    os << " decoder_block=gemma4_small hidden_size_per_layer_input=" << m.per_layer_input_dim
       << " vocab_size_per_layer_input=" << m.per_layer_vocab
       << " num_kv_shared_layers=" << m.num_kv_shared_layers
       << " use_double_wide_mlp=" << (m.double_wide_mlp ? "true" : "false");
  if (m.has_moe())
    os << " norm_topk_prob=" << (m.norm_topk_prob ? "true" : "false")
       << " load_balance_loss_weight=" << m.load_balance_loss_weight;
  return os.str();
}

}  // namespace gemmax

#include "gemmax/config/run_config.h"

#include <sstream>

#include "gemmax/base/error.h"

namespace gemmax {

ModelConfig model_config_from(const Config& c) {
  ModelConfig m;
  m.name = c.get_string("model_name");
  m.vocab_size = c.get_int("vocab_size");
  m.d_model = c.get_int("base_emb_dim");
  m.num_layers = c.get_int("base_num_decoder_layers");
  m.num_heads = c.get_int("base_num_query_heads");
  m.num_kv_heads = c.get_int("base_num_kv_heads");
  m.head_dim = c.get_int("head_dim");
  m.global_num_kv_heads = c.get_int("global_num_kv_heads");
  if (m.global_num_kv_heads == 0) m.global_num_kv_heads = m.num_kv_heads;  // MaxText's 0: as sliding
  m.global_head_dim = c.get_int("global_head_dim");
  m.mlp_dim = c.get_int("base_mlp_dim");
  m.moe_mlp_dim = c.get_int("base_moe_mlp_dim");
  m.num_experts = c.get_int("num_experts");
  m.num_experts_per_tok = c.get_int("num_experts_per_tok");
  m.sliding_window = c.get_int("sliding_window_size");
  m.sliding_window_pattern = c.get_int("sliding_window_pattern");
  m.local_rope_theta = c.get_double("local_rope_max_timescale");
  m.global_rope_theta = c.get_double("global_rope_max_timescale");
  m.local_rope_proportion = c.get_double("local_rope_proportion");
  m.global_rope_proportion = c.get_double("global_rope_proportion");
  m.share_kv_projections = c.get_bool("share_kv_projections");
  m.final_logits_soft_cap = c.get_double("final_logits_soft_cap");
  m.norm_eps = c.get_double("normalization_layer_epsilon");
  m.norm_topk_prob = c.get_bool("norm_topk_prob");
  m.load_balance_loss_weight = c.get_double("load_balance_loss_weight");
  m.load_balance_density = parse_load_balance_density(c.get_string("load_balance_density"));
  m.initializer_range = c.get_double("initializer_range");
  m.init_scheme = parse_init_scheme(c.get_string("init_scheme"));
  m.dense_init_scale = c.get_double("dense_init_scale");
  const std::string block = c.get_string("decoder_block");  // gemma4 | gemma4_small (at load)
  m.per_layer_input_dim = c.get_int("hidden_size_per_layer_input");
  m.per_layer_vocab = c.get_int("vocab_size_per_layer_input");
  m.num_kv_shared_layers = c.get_int("num_kv_shared_layers");
  m.double_wide_mlp = c.get_bool("use_double_wide_mlp");
  if (block == "gemma4" && (m.per_layer_input_dim != 0 || m.num_kv_shared_layers != 0 ||
                            m.double_wide_mlp))
    fail("decoder_block \"gemma4\" has no per-layer inputs, shared K/V or double-wide MLPs, but "
         "hidden_size_per_layer_input=", m.per_layer_input_dim, " num_kv_shared_layers=",
         m.num_kv_shared_layers, " use_double_wide_mlp=", m.double_wide_mlp ? "true" : "false",
         "; set decoder_block=gemma4_small or those keys to 0/false");
  m.validate();
  return m;
}

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

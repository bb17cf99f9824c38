#include "gemmax/train/flops.h"

#include <algorithm>

namespace gemmax {

StepFlops training_flops(const ModelConfig& c, int64_t batch, int64_t seq) {
  const double B = double(batch), T = double(seq), D = double(c.d_model), H = double(c.num_heads);
  const double E = double(c.num_experts), K = double(c.num_experts_per_tok);
  // A gated MLP of hidden m: two input matmuls and one output matmul.
  auto ffn = [&](double m) { return 2 * B * T * m * D * 2 + 2 * B * T * m * D; };
  const double n_global = double(c.num_global_layers());
  const double n_local = double(c.num_layers) - n_global;
  const double hd_l = double(c.head_dim), kv_l = double(c.num_kv_heads);
  const double hd_g = double(c.global_head_dim), kv_g = double(c.global_num_kv_heads);
  const double kv_mult_g = c.share_kv_projections ? 1.0 : 2.0;  // K = V: one kv projection

  StepFlops f;
  const double moe = double(c.num_layers) *
                     (ffn(double(c.mlp_dim)) +
                      (c.has_moe() ? 2 * B * T * D * E + K * ffn(double(c.moe_mlp_dim)) : 0.0));
  const double local = 2 * B * T * D * (H + 2 * kv_l) * hd_l + 2 * B * T * D * H * hd_l;
  const double global = 2 * B * T * D * (H + kv_mult_g * kv_g) * hd_g + 2 * B * T * D * H * hd_g;
  const double unembed = 2 * B * T * D * double(c.vocab_size);
  f.learnable = moe + n_local * local + n_global * global + unembed;
  const double W = std::min(double(c.sliding_window), T);
  f.attention = n_global * (2 * B * T * T * H * hd_g) + n_local * (4 * B * (T * W - W * W / 2) * H * hd_l);
  return f;
}

}  // namespace gemmax

#include "gemmax/train/flops.h"

#include <algorithm>

namespace gemmax {

StepFlops training_flops(const ModelConfig& c, int64_t batch, int64_t seq,
                         const AdapterTable* adapters) {
  const double B = double(batch), T = double(seq), D = double(c.d_model), H = double(c.num_heads);
  const double E = double(c.num_experts), K = double(c.num_experts_per_tok);
  // A gated MLP of hidden m: two input matmuls and one output matmul.
  auto ffn = [&](double m) { return 2 * B * T * m * D * 2 + 2 * B * T * m * D; };
  const double n_global = double(c.num_global_layers());
  const double n_local = double(c.num_layers) - n_global;  // (the attention products below)
  const double hd_l = double(c.head_dim), kv_l = double(c.num_kv_heads);
  const double hd_g = double(c.global_head_dim), kv_g = double(c.global_num_kv_heads);
  const double kv_mult_g = c.share_kv_projections ? 1.0 : 2.0;  // K = V: one kv projection

  StepFlops f;
  const double P = double(c.per_layer_input_dim);
  f.learnable = 2 * B * T * D * double(c.vocab_size);  // the unembedding
  // The small block: x_0's projection to every layer's input, and each layer's gate and
  // projection back (4 B T D P).
  f.learnable += 2 * B * T * D * double(c.num_layers) * P;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool global = c.is_global(l);
    const double hd = global ? hd_g : hd_l;
    // k and v projections: none on K/V-sharing layers, one with K = V
    const double kv = c.kv_shared(l) ? 0.0 : global ? kv_mult_g * kv_g : 2 * kv_l;
    f.learnable += 2 * B * T * D * (H + kv) * hd + 2 * B * T * D * H * hd;  // q, k, v; o
    f.learnable += ffn(double(c.layer_mlp_dim(l))) + 4 * B * T * D * P;
    if (c.has_moe()) f.learnable += 2 * B * T * D * E + K * ffn(double(c.moe_mlp_dim));
  }
  const double W = std::min(double(c.sliding_window), T);
  f.attention =
      n_global * (2 * B * T * T * H * hd_g) + n_local * (4 * B * (T * W - W * W / 2) * H * hd_l);
  if (adapters)
    for (const LoraTarget& t : adapters->targets())
      f.adapters += 2 * B * T * (t.experts > 1 ? K : 1.0) * double(adapters->shape().rank) *
                    double(t.in + t.out);
  return f;
}

}  // namespace gemmax

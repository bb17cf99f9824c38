// The attention block of a decoder layer (docs/MODEL.md §3, §4.1-4.4):
//   a = RMSNorm(x; input_layernorm)
//   q, k, v = projections of a; q, k RMSNorm per head with scale, v without;
//   RoPE on q and k (on K = V global layers v is the k projection itself,
//   before k's norm and RoPE) proj = Attn(q, k, v) . Wo^T; returns h = x +
//   RMSNorm(proj; post_attention_layernorm), the residual stream after
//   attention (the norm and the residual add are one op)
#pragma once

#include <vector>

#include "gemmax/model/context.h"
#include "gemmax/model/weights.h"

namespace gemmax {

struct AttentionMatmuls {      // ActClass::Matmul
  Tensor q_raw, k_raw, v_raw;  // projections [T, heads*hd]; v_raw is k_raw on K = V layers
  Tensor proj;                 // attn . Wo^T [T, D]
  Tensor lora_q, lora_k, lora_v, lora_o;  // the adapters' x . A^T, scaled (model/lora/)
};
struct AttentionOthers {   // ActClass::Other
  Tensor normed, rstd_in;  // a and its rstd
  Tensor q, k, v;          // normed (q, k also rotated) [T, heads, hd]
  Tensor rstd_q, rstd_k, rstd_v;
  Tensor attn, lse;  // attention output [T, H, hd] and its log-sum-exp [B, H, S]
  Tensor rstd_post;  // the post-norm's rstd
  Tensor out;        // h = x + RMSNorm(proj; post_attention_layernorm) [T, D]
};
using AttentionActs = RematActs<AttentionMatmuls, AttentionOthers>;

// K/V sharing (gemma4-e2b/e4b): a donor layer leaves its normed, rotated k and v here for the
// later layers that read them, and those layers' backward adds their gradients for the donor's.
struct DonorKv {
  std::vector<Tensor> k, v, dk, dv;  // by donor layer
  explicit DonorKv(int64_t layers) : k(layers), v(layers), dk(layers), dv(layers) {}
};

// The block in three parts: project (a, q, k, v), attend (attn, lse: within the batch, or
// over the decoder's KV cache when ctx.attention_core is set), output (proj, out). Each fills
// in only the activations `acts` does not hold yet (all on a fresh struct).
void attention_forward(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                       const Tensor& x, AttentionActs& acts);
// a = RMSNorm(x); q, k, v projected, normed per head; q, k rotated to ctx.in.positions.
void attention_project(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                       const Tensor& x, AttentionActs& acts);
// proj = attn . Wo^T; out = x + RMSNorm(proj; post_attention_layernorm).
void attention_output(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                      const Tensor& x, AttentionActs& acts);

// Attention other than within the batch: the decoder's KV cache (model/decode.h).
class AttentionCore {
 public:
  virtual ~AttentionCore() = default;
  // Writes acts.attn [T, H, hd] from acts.q, acts.k, acts.v of this step's T tokens.
  virtual void attend(const LayerContext& ctx, int64_t layer, AttentionActs& acts) = 0;
};

// dx += the gradient through the attention branch (not the residual's identity: the caller adds
// dout itself); weight gradients accumulate into g, except where g's tensor is undefined (a frozen
// weight: no gradient is computed for it).
void attention_backward(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                        const LayerWeights& g, const Tensor& x, const AttentionActs& acts,
                        const Tensor& dout, const Tensor& dx);

}  // namespace gemmax

// Attention: causal, GQA, optional sliding window, segment mask, scale 1.0; and the attention of
// new tokens over a KV cache.
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

struct AttentionShape {
  int64_t batch = 0, seq = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // sliding window: key j is visible from query i iff j > i - window; 0: none
  // MaxText's dot_product attention with float32_qk_product=false, float32_logits=true: each
  // score q.k is rounded to the activation dtype before the softmax (whose statistics stay
  // fp32), and in the backward each score's gradient is rounded to it too (the gradient of the
  // bf16 score). false: fp32 scores, as flash attention computes them.
  bool round_scores = false;
  // MaxText's dot_product attention with float32_qk_product=false and float32_logits=false: the
  // softmax itself in the activation dtype, rounded where XLA on the CPU rounds it, forward and
  // backward (reference/attention_rounded_softmax.h); round_scores is then read as true. The
  // reference and cpu backends build it; the cuda backend refuses it.
  bool round_softmax = false;
  // Every row's segment ids are one value (StepInputs::one_segment: checked on the host), so the
  // segment mask masks nothing. A hint: backends that always apply the mask may ignore it; the
  // cuda backend's cuDNN path (cuda_attention=cudnn) runs only with it.
  bool one_segment = false;
};

// q, o [B*S, H, hd]; k, v [B*S, KV, hd]; lse [B, H, S] (stat dtype); segment_ids int32 [B*S].
struct AttentionForwardArgs {
  const Tensor& o;
  const Tensor& lse;
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  const Tensor& segment_ids;
  AttentionShape shape;
};
// Writes dq, dk, dv (no accumulation).
struct AttentionBackwardArgs {
  const Tensor& dq;
  const Tensor& dk;
  const Tensor& dv;
  const Tensor& dout;
  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  const Tensor& o;
  const Tensor& lse;
  const Tensor& segment_ids;
  AttentionShape shape;
};
// Attention of new tokens over a KV cache (incremental decoding; model/decode.h). q, o [n, H, hd]
// are the new tokens at positions q_pos (int32 [n]). k, v [C, KV, hd] are cache slots in any
// order; slot c holds position kv_pos[c] (int32 [C]; -1: empty). Query i sees slot c iff
// 0 <= kv_pos[c] <= q_pos[i] and (window == 0 or kv_pos[c] > q_pos[i] - window): the same mask as
// attention_forward on one segment, so the two agree to rounding. Every query must see at least
// one slot (its own key, written before the call).
struct AttentionDecodeArgs {
  const Tensor& o;
  const Tensor& q;
  const Tensor& q_pos;
  const Tensor& k;
  const Tensor& v;
  const Tensor& kv_pos;
  int64_t window = 0;
};

void validate(const AttentionForwardArgs& args);
void validate(const AttentionBackwardArgs& args);
void validate(const AttentionDecodeArgs& args);

#define GEMMAX_ATTENTION_OPS(X)                           \
  X(attention_forward, AttentionForwardArgs, Attention)   \
  X(attention_backward, AttentionBackwardArgs, Attention) \
  X(attention_decode, AttentionDecodeArgs, Attention)

}  // namespace gemmax

#include "gemmax/backend/cuda/cudnn_attention_plan.h"

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"

namespace gemmax::cuda {
namespace {

// [B*S, heads, hd] seen as [B, heads, S, hd].
SdpaTensor token_major(int64_t B, int64_t S, int64_t heads, int64_t hd) {
  return {{B, heads, S, hd}, {S * heads * hd, hd, heads * hd, 1}};
}

}  // namespace

SdpaChoice choose_cudnn_attention(const kern::AttnDims& d, const SdpaCall& call) {
  SdpaChoice c;
  c.shape_class = str_cat("[head_dim=", d.hd, d.window > 0 ? " sliding" : "", "]");
  auto refuse = [&](std::string why) {
    c.why = std::move(why);
    return c;
  };
  if (!call.bf16) return refuse("cuDNN's path takes bfloat16 activations");
  if (d.hd != kCudnnHeadDim)
    return refuse(str_cat("cuDNN's path takes head_dim ", kCudnnHeadDim, ", not ", d.hd));
  if (d.round_scores)
    return refuse(
        "scores rounded to bfloat16 (float32_qk_product=false): cuDNN keeps them in fp32");
  if (!call.one_segment)
    return refuse(
        "segment ids hold more than one segment in a row (packed documents or padding): cuDNN "
        "takes documents only as ragged offsets, which this path does not build");
  if (!call.aligned) return refuse("an operand is not 16-byte aligned (a view at an odd offset?)");
  if (d.B <= 0 || d.S <= 0 || d.H <= 0 || d.KV <= 0 || d.H % d.KV != 0)
    return refuse(str_cat("no attention to run (B=", d.B, " S=", d.S, " H=", d.H, " KV=", d.KV, ")"));
  SdpaPlan p;
  p.batch = d.B;
  p.heads = d.H;
  p.kv_heads = d.KV;
  p.seq = d.S;
  p.head_dim = d.hd;
  p.q = p.o = token_major(d.B, d.S, d.H, d.hd);
  p.k = p.v = token_major(d.B, d.S, d.KV, d.hd);
  p.stats = {{d.B, d.H, d.S, 1}, {d.H * d.S, d.S, 1, 1}};
  p.left_bound = d.window > 0 && d.window < d.S ? d.window : 0;
  c.plan = p;
  return c;
}

size_t cudnn_workspace_block(int64_t need, size_t shared, size_t limit) {
  GEMMAX_CHECK(need >= 0, "cuDNN asked for a workspace of ", need, " bytes");
  GEMMAX_CHECK(size_t(need) <= limit, "cuDNN's attention asks for ", format_bytes(double(need)),
               " of workspace, over the ", format_bytes(double(limit)),
               " the cuda backend allows it: cuda_attention=mma");
  if (size_t(need) <= shared) return 0;
  constexpr size_t kRound = size_t(2) << 20;
  return (size_t(need) + kRound - 1) / kRound * kRound;
}

}  // namespace gemmax::cuda

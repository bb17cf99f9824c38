// The attention forward on Hopper's TMA, mbarrier and wgmma (kernels/attention_sm90_fwd.h),
// taken by bfloat16 runs with cuda_attention=sm90 (or cudnn, where cuDNN does not take the shape)
// where the tensor-core kernels apply.
#pragma once

#include "gemmax/backend/cuda/kernels/attention_sm90_fwd.h"
#include "gemmax/backend/cuda/ops/common.h"
#include "gemmax/base/strings.h"

namespace gemmax::cuda::ops {

// false (after a slow-path note) where the sm90 forward does not take the shape: the mma kernel
// runs it instead.
template <class P>
bool attention_forward_sm90(P& p, const Tensor& o, const Tensor& lse, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& seg,
                            const kern::AttnDims& d) {
  if (d.hd != 256 && d.hd != 512) {
    p.slow_paths().note_instead("attention_forward", str_cat("[head_dim=", d.hd, "]"),
                                "the mma.sync kernel",
                                "the sm90 attention forward takes head_dim 256 and 512");
    return false;
  }
  kern::AttentionSm90Params a{};
  a.o = ptr<bf16>(o);
  a.lse = ptr<float>(lse);
  a.q = ptr<bf16>(q);
  a.seg = ptr<int32_t>(seg);
  a.d = d;
  // K and V [B, S, KV, hd] as {KV * hd, S, B}: a box is one kv head's keys of one sequence.
  const int64_t dims[3] = {d.KV * d.hd, d.S, d.B};
  const int64_t strides[2] = {d.KV * d.hd * 2, d.S * d.KV * d.hd * 2};
  auto map = [&](kern::TensorMap3d& m, const Tensor& t, int bc) {
    const int32_t box[3] = {64, bc, 1};
    const char* bad =
        kern::make_tensor_map_3d(&m, t.raw(), 2, dims, strides, box, kern::Swizzle::k128B);
    GEMMAX_CHECK(!bad, "attention_forward with cuda_attention=sm90: the tensor map of ", t.str(),
                 ": ", bad);
    p.encode_tensor_map(m);
  };
  auto run = [&]<int HD>() {
    using F = kern::FlashSm90<HD>;
    map(a.k, k, F::Bc);
    map(a.v, v, F::Bc);
    a.hb = kern::heads_per_block(d.group(), F::R / 16);
    Launch l;
    l.gx = uint32_t(kern::ceil_div(d.S, F::R / a.hb));
    l.gy = uint32_t(d.KV * (d.group() / a.hb));
    l.gz = uint32_t(d.B);
    l.threads = F::kThreads;
    l.smem = F::smem_bytes();
    p.template launch<kern::AttentionForwardSm90Kernel<HD>>(l, a);
  };
  if (d.hd == 256)
    run.template operator()<256>();
  else
    run.template operator()<512>();
  return true;
}

}  // namespace gemmax::cuda::ops

// Attention ops: forward, backward and decode.
#pragma once

#include <initializer_list>
#include <tuple>
#include <type_traits>

#include "gemmax/backend/backend_options.h"
#include "gemmax/backend/cuda/cudnn_attention_plan.h"
#include "gemmax/backend/cuda/kernels/attention_mma.h"
#include "gemmax/backend/cuda/kernels/attention_simple.h"
#include "gemmax/backend/cuda/kernels/attention_sm90_bwd_dq.h"
#include "gemmax/backend/cuda/ops/attention_sm90_ops.h"
#include "gemmax/backend/cuda/ops/common.h"
#include "gemmax/base/strings.h"

namespace gemmax::cuda::ops {

inline kern::AttnDims attention_dims(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& o, const Tensor& lse, const Tensor& seg,
                                     const AttentionShape& s) {
  GEMMAX_CHECK(s.head_dim <= 32 * kern::kAttnMaxCols, "cuda backend: head_dim ", s.head_dim,
               " is over the attention kernels' limit of ", 32 * kern::kAttnMaxCols);
  GEMMAX_CHECK(s.batch <= 65535 && s.num_heads <= 65535, "attention: batch ", s.batch, " or heads ",
               s.num_heads, " too large for one launch");
  check_stat(lse, "attention");
  GEMMAX_CHECK(!s.round_softmax,
               "cuda backend: MaxText's softmax in bf16 (attention=dot_product with "
               "float32_qk_product=false and float32_logits=false) is not built on the cuda "
               "backend: set float32_logits=true or float32_qk_product=true, or attention=flash, "
               "or use backend=cpu");
  return {s.batch, s.seq, s.num_heads, s.num_kv_heads, s.head_dim, s.window, s.round_scores};
}

// The tensor-core kernels take bfloat16 with head_dim 128, 256 or 512 (fast kernels on); a
// bfloat16 run that falls back says so once per op and shape class.
template <class E, class P>
bool attention_mma_applies(P& p, const char* op, int64_t hd,
                           std::initializer_list<const Tensor*> operands) {
  if constexpr (!std::is_same_v<E, bf16>) {
    return false;
  } else {
    if (!p.fast_kernels()) {
      p.slow_paths().note(op, "", "cuda_kernels=simple (cuda_kernels=fast runs the tensor cores)");
      return false;
    }
    const std::string shape = str_cat("[head_dim=", hd, "]");
    if (hd != 128 && hd != 256 && hd != 512) {
      p.slow_paths().note(op, shape, "the tensor-core kernels take head_dim 128, 256 or 512");
      return false;
    }
    for (const Tensor* t : operands)
      if (reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0) {
        p.slow_paths().note(op, shape,
                            str_cat(t->str(), " is not 16-byte aligned (a view at an odd offset?)"));
        return false;
      }
    return true;
  }
}

// Calls f.template operator()<HD>() for the tensor-core kernels' head sizes.
template <class F>
void dispatch_head_dim(int64_t hd, F&& f) {
  if (hd == 128) f.template operator()<128>();
  if (hd == 256) f.template operator()<256>();
  if (hd == 512) f.template operator()<512>();
}

template <class P>
void attention_forward_mma(P& p, const Tensor& o, const Tensor& lse, const Tensor& q,
                           const Tensor& k, const Tensor& v, const Tensor& seg,
                           const kern::AttnDims& d) {
  dispatch_head_dim(d.hd, [&]<int HD>() {
    using F = kern::FlashForward<HD>;
    const int hb = kern::heads_per_block(d.group(), F::kSlices);
    Launch l;
    l.gx = uint32_t(kern::ceil_div(d.S, F::R / hb));
    l.gy = uint32_t(d.KV * (d.group() / hb));
    l.gz = uint32_t(d.B);
    l.threads = F::kThreads;
    l.smem = F::smem_bytes();
    p.template launch<kern::AttentionForwardMmaKernel<HD>>(
        l, ptr<bf16>(o), ptr<float>(lse), (const bf16*)ptr<bf16>(q), (const bf16*)ptr<bf16>(k),
        (const bf16*)ptr<bf16>(v), (const int32_t*)ptr<int32_t>(seg), d, hb);
  });
}

// cuda_attention=cudnn: cuDNN's fused attention where it takes the call (cudnn_attention_plan.h).
// run(cudnn, plan, workspace) returns "" when cuDNN ran it, else why cuDNN refused the graph.
// false when cuDNN did not run it (said once per shape class): the kernels run instead. The
// emulator has no cuDNN (it refuses cuda_attention=cudnn when it is made).
template <class P, class Run>
bool attention_cudnn(P& p, const char* op, const kern::AttnDims& d, const AttentionShape& s,
                     std::initializer_list<const Tensor*> operands, Run&& run) {
  if constexpr (!requires { p.cudnn(); }) {
    return false;
  } else {
    if (p.attention_path() != CudaAttention::kCudnn) return false;
    bool aligned = true;
    for (const Tensor* t : operands) aligned = aligned && reinterpret_cast<uintptr_t>(t->raw()) % 16 == 0;
    const SdpaChoice c = choose_cudnn_attention(d, {.one_segment = s.one_segment, .aligned = aligned});
    const std::string why =
        c.plan ? run(*p.cudnn(), *c.plan, [&p](int64_t n) { return p.library_workspace(n); }) : c.why;
    if (why.empty()) return true;
    p.slow_paths().note_instead(op, c.shape_class, "the sm90 kernels, not cuDNN", why);
    return false;
  }
}

template <class P>
void attention_forward(P& p, const AttentionForwardArgs& args, NoDims) {
  const auto& [o, lse, q, k, v, seg, s] = args;
  const kern::AttnDims d = attention_dims(q, k, v, o, lse, seg, s);
  if (q.numel() == 0) return;
  dispatch<float, bf16>(q, "attention_forward", [&]<class E>() {
    if (attention_mma_applies<E>(p, "attention_forward", d.hd, {&o, &q, &k, &v})) {
      if (attention_cudnn(p, "attention_forward", d, s, {&o, &q, &k, &v},
                          [&](auto& c, const SdpaPlan& plan, const auto& ws) {
                            return c.forward(plan, o.raw(), ptr<float>(lse), q.raw(), k.raw(),
                                             v.raw(), ws);
                          }))
        return;
      if (p.attention_path() != CudaAttention::kMma &&
          attention_forward_sm90(p, o, lse, q, k, v, seg, d))
        return;
      attention_forward_mma(p, o, lse, q, k, v, seg, d);
      return;
    }
    const kern::AttnPtrs in{q.raw(), k.raw(), v.raw(),          nullptr,
                            nullptr, nullptr, ptr<int32_t>(seg)};
    using K = kern::AttentionForwardSimpleKernel;
    Launch l;
    l.gx = uint32_t(kern::ceil_div(d.S, K::kRows));
    l.gy = uint32_t(d.H);
    l.gz = uint32_t(d.B);
    l.threads = K::kMaxThreads;
    l.smem = K::smem_bytes(d.hd);
    p.template launch<K>(l, ptr<E>(o), ptr<float>(lse), in, d);
  });
}

// The flash backward's row dots delta_i = do_i . o_i in op scratch; null (noted) when they do
// not fit.
template <class P>
float* attention_row_dots(P& p, Scratch& s, const Tensor& dout, const Tensor& o,
                          const kern::AttnDims& d) {
  if (size_t(d.B * d.H * d.S) * sizeof(float) + 256 > s.left()) {
    p.slow_paths().note("attention_backward", str_cat("[B*H*S=", d.B * d.H * d.S, "]"),
                        str_cat("its row dots need ", d.B * d.H * d.S * 4, " bytes, more than the ",
                                s.left(), " bytes of op scratch"));
    return nullptr;
  }
  float* delta = s.take<float>(d.B * d.H * d.S, "attention_backward's row dots");
  p.template launch<kern::AttentionDeltaKernel>(stride_launch(d.B * d.H * d.S * 32, 256, 16384),
                                                delta, (const bf16*)ptr<bf16>(o),
                                                (const bf16*)ptr<bf16>(dout), d);
  return delta;
}

// false when the delta buffer does not fit in scratch (the plain kernels then run).
template <class P>
bool attention_backward_mma(P& p, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                            const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& o, const Tensor& lse, const Tensor& seg,
                            const kern::AttnDims& d) {
  Scratch s = p.scratch();
  float* delta = attention_row_dots(p, s, dout, o, d);
  if (!delta) return false;
  const bf16 *pq = ptr<bf16>(q), *pk = ptr<bf16>(k), *pv = ptr<bf16>(v);
  const bf16* pdo = ptr<bf16>(dout);
  const float* plse = ptr<float>(lse);
  const int32_t* pseg = ptr<int32_t>(seg);
  dispatch_head_dim(d.hd, [&]<int HD>() {
    using Fq = kern::FlashDq<HD>;
    const int hb = kern::heads_per_block(d.group(), Fq::kSlices);
    Launch l;
    l.gx = uint32_t(kern::ceil_div(d.S, Fq::R / hb));
    l.gy = uint32_t(d.KV * (d.group() / hb));
    l.gz = uint32_t(d.B);
    l.threads = Fq::kThreads;
    l.smem = Fq::smem_bytes();
    p.template launch<kern::AttentionDqMmaKernel<HD>>(l, ptr<bf16>(dq), pq, pk, pv, pdo, plse,
                                                      (const float*)delta, pseg, d, hb);
    using Fk = kern::FlashDkv<HD>;
    l.gx = uint32_t(kern::ceil_div(d.S, Fk::Bk));
    l.gy = uint32_t(d.KV);
    l.threads = Fk::kThreads;
    l.smem = Fk::smem_bytes();
    p.template launch<kern::AttentionDkvMmaKernel<HD>>(l, ptr<bf16>(dk), ptr<bf16>(dv), pq, pk, pv,
                                                       pdo, plse, (const float*)delta, pseg, d);
  });
  return true;
}

// The sm90 kernels (TMA, mbarrier, wgmma; kernels/attention_sm90_bwd*.h) with
// cuda_attention=sm90, and cudnn's fallback: head_dim 256 and 512; other sizes run on the mma
// kernels.
template <int HD, class P>
void attention_backward_sm90_launch(P& p, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& lse, const Tensor& seg,
                                    const float* delta, const kern::AttnDims& d) {
  using A = kern::AttnSm90Bwd<HD>;
  // Each kernel's own tiles are 64 rows, its ring's kStream: q and dout are the dq kernel's
  // own and the dk/dv kernel's ring, k and v the other way round.
  auto params = [&](int qo_rows, int kv_rows) {
    kern::AttnSm90BwdParams a{};
    a.dq = ptr<bf16>(dq);
    a.dk = ptr<bf16>(dk);
    a.dv = ptr<bf16>(dv);
    a.lse = ptr<float>(lse);
    a.delta = delta;
    a.seg = ptr<int32_t>(seg);
    a.d = d;
    // [B, S, heads, hd] as {heads * hd, S, B}: rows past a sequence's end read as zeros.
    for (auto [map, t, heads, rows] :
         {std::tuple{&a.q, &q, d.H, qo_rows}, std::tuple{&a.k, &k, d.KV, kv_rows},
          std::tuple{&a.v, &v, d.KV, kv_rows}, std::tuple{&a.dout, &dout, d.H, qo_rows}}) {
      const int64_t cols = heads * HD;
      const int64_t dims[3] = {cols, d.S, d.B}, strides[2] = {cols * 2, d.S * cols * 2};
      const int32_t box[3] = {64, rows, 1};
      const char* bad = kern::make_tensor_map_3d(map, t->raw(), 2, dims, strides, box,
                                                 kern::Swizzle::k128B);
      GEMMAX_CHECK(!bad, "attention_backward with cuda_attention=sm90: the tensor map of ",
                   t->str(), ": ", bad);
      p.encode_tensor_map(*map);
    }
    return a;
  };
  Launch l;
  l.gx = uint32_t(kern::ceil_div(d.S, int64_t(A::kRows)));
  l.gy = uint32_t(d.H);
  l.gz = uint32_t(d.B);
  l.threads = A::kThreads;
  l.smem = kern::AttnSm90DqSmem<A>::bytes();
  const kern::AttnSm90BwdParams dq_params = params(A::kRows, A::kStream);
  p.template launch<kern::AttentionDqSm90Kernel<HD>>(l, dq_params);
  l.gx *= uint32_t(A::kDkvParts);
  l.gy = uint32_t(d.KV);
  l.smem = kern::AttnSm90DkvSmem<A>::bytes();
  // At head_dim 256 the ring's tiles are 64 rows too: the same maps serve both kernels.
  p.template launch<kern::AttentionDkvSm90Kernel<HD>>(
      l, A::kStream == A::kRows ? dq_params : params(A::kStream, A::kRows));
}

template <class P>
bool attention_backward_sm90(P& p, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                             const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& o, const Tensor& lse, const Tensor& seg,
                             const kern::AttnDims& d) {
  if (p.attention_path() == CudaAttention::kMma) return false;
  if (d.hd != 256 && d.hd != 512) {
    p.slow_paths().note_instead("attention_backward", str_cat("[head_dim=", d.hd, "]"),
                                "the mma.sync kernels",
                                "the sm90 backward kernels take head_dim 256 and 512");
    return false;
  }
  if (d.S + kern::AttnSm90BwdBlock::kRows >= (int64_t(1) << 31)) {
    p.slow_paths().note_instead("attention_backward", str_cat("[S=", d.S, "]"),
                                "the mma.sync kernels",
                                "more rows than a TMA coordinate reaches (2^31)");
    return false;
  }
  Scratch s = p.scratch();
  float* delta = attention_row_dots(p, s, dout, o, d);
  if (!delta) return false;
  if (d.hd == 256)
    attention_backward_sm90_launch<256>(p, dq, dk, dv, dout, q, k, v, lse, seg, delta, d);
  else
    attention_backward_sm90_launch<512>(p, dq, dk, dv, dout, q, k, v, lse, seg, delta, d);
  return true;
}

template <class P>
void attention_backward(P& p, const AttentionBackwardArgs& args, NoDims) {
  const auto& [dq, dk, dv, dout, q, k, v, o, lse, seg, s] = args;
  const kern::AttnDims d = attention_dims(q, k, v, o, lse, seg, s);
  if (q.numel() == 0) return;
  dispatch<float, bf16>(q, "attention_backward", [&]<class E>() {
    const bool fast = attention_mma_applies<E>(p, "attention_backward", d.hd,
                                               {&dq, &dk, &dv, &dout, &q, &k, &v, &o});
    if (fast &&
        attention_cudnn(p, "attention_backward", d, s, {&dq, &dk, &dv, &dout, &q, &k, &v, &o},
                        [&](auto& c, const SdpaPlan& plan, const auto& ws) {
                          return c.backward(plan, dq.raw(), dk.raw(), dv.raw(), dout.raw(),
                                            q.raw(), k.raw(), v.raw(), o.raw(), ptr<float>(lse),
                                            ws);
                        }))
      return;
    if (fast && (attention_backward_sm90(p, dq, dk, dv, dout, q, k, v, o, lse, seg, d) ||
                 attention_backward_mma(p, dq, dk, dv, dout, q, k, v, o, lse, seg, d)))
      return;
    const kern::AttnPtrs in{q.raw(),    k.raw(),         v.raw(),          o.raw(),
                            dout.raw(), ptr<float>(lse), ptr<int32_t>(seg)};
    using Dq = kern::AttentionDqSimpleKernel;
    Launch l;
    l.gx = uint32_t(kern::ceil_div(d.S, Dq::kRows));
    l.gy = uint32_t(d.H);
    l.gz = uint32_t(d.B);
    l.threads = Dq::kMaxThreads;
    l.smem = Dq::smem_bytes(d.hd);
    p.template launch<Dq>(l, ptr<E>(dq), in, d);
    using Dkv = kern::AttentionDkvSimpleKernel;
    l.gx = uint32_t(kern::ceil_div(d.S, Dkv::kKeys));
    l.gy = uint32_t(d.KV);
    l.threads = Dkv::kMaxThreads;
    l.smem = Dkv::smem_bytes(d.hd);
    p.template launch<Dkv>(l, ptr<E>(dk), ptr<E>(dv), in, d);
  });
}

template <class P>
void attention_decode(P& p, const AttentionDecodeArgs& args, NoDims) {
  const auto& [o, q, q_pos, k, v, kv_pos, window] = args;
  GEMMAX_CHECK(q.dim(2) <= 32 * kern::kAttnMaxCols, "cuda backend: head_dim ", q.dim(2),
               " is over the attention kernels' limit of ", 32 * kern::kAttnMaxCols);
  if (q.numel() == 0) return;
  const kern::DecodeDims d{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(0), window};
  dispatch<float, bf16>(q, "attention_decode", [&]<class E>() {
    using K = kern::AttentionDecodeKernel;
    Launch l;
    l.gx = uint32_t(d.n);
    l.gy = uint32_t(d.H);
    l.threads = K::kMaxThreads;
    l.smem = K::smem_bytes(d.hd);
    p.template launch<K>(l, ptr<E>(o), (const E*)ptr<E>(q), (const int32_t*)ptr<int32_t>(q_pos),
                         (const E*)ptr<E>(k), (const E*)ptr<E>(v),
                         (const int32_t*)ptr<int32_t>(kv_pos), d, p.errors());
  });
}

}  // namespace gemmax::cuda::ops

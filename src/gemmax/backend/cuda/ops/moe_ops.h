// MoE ops: router, load balance, the sort by expert, permute and combine.
#pragma once

#include "gemmax/backend/cuda/kernels/moe.h"
#include "gemmax/backend/cuda/kernels/norm_rope.h"
#include "gemmax/backend/cuda/kernels/sort.h"
#include "gemmax/backend/cuda/ops/common.h"
#include "gemmax/backend/cuda/ops/elementwise_ops.h"

namespace gemmax::cuda::ops {

inline Launch warps_launch(int64_t items) {  // one warp per item, 8 per block
  return stride_launch(items * 32, 256, 16384);
}
inline Launch row_blocks(int64_t rows, int threads = 128) {
  Launch l = stride_launch(rows * threads, threads, 16384);
  l.smem = size_t(threads / 32) * sizeof(float);
  return l;
}

template <class P>
void router_forward(P& p, const RouterForwardArgs& args, TopKDims dims) {
  const auto& [probs, idx, weights, logits, scale, renormalize] = args;
  const int64_t T = dims.T, E = dims.E, K = dims.K;
  GEMMAX_CHECK(E <= 32 * kern::kMaxExpertsPerLane && K <= 32 && K <= E,
               "cuda backend: router with ", E, " experts top-", K, " (at most ",
               32 * kern::kMaxExpertsPerLane, " experts and top-32)");
  check_stat(probs, "router_forward");
  check_stat(weights, "router_forward");
  if (T == 0) return;
  const kern::RouterDims d{T, E, K, renormalize};
  dispatch<float, bf16>(logits, "router_forward", [&]<class E_>() {
    dispatch<float, bf16, double>(scale, "router_forward", [&]<class W>() {
      p.template launch<kern::RouterForwardKernel>(
          warps_launch(T), ptr<float>(probs), ptr<int32_t>(idx), ptr<float>(weights),
          (const E_*)ptr<E_>(logits), (const W*)ptr<W>(scale), d);
    });
  });
}

template <class P>
void router_backward(P& p, const RouterBackwardArgs& args, TopKDims dims) {
  const auto& [dlogits, dscale, dweights, probs, idx, scale, renormalize, lb_dprobs, seq] = args;
  const int64_t T = dims.T, E = dims.E, K = dims.K;
  check_stat(probs, "router_backward");
  check_stat(dweights, "router_backward");
  check_stat(lb_dprobs, "router_backward");
  if (T == 0) return;
  const kern::RouterDims d{T, E, K, renormalize};
  Scratch s = p.scratch();
  const int64_t chunk = 256, chunks = kern::ceil_div(T, chunk);
  float* partial = s.take<float>(chunks * E, "the per-expert scale gradient");
  Launch l;
  l.gx = uint32_t(chunks);
  l.threads = 128;
  l.smem = size_t(4 * E) * sizeof(float);
  p.template launch<kern::RouterScaleGradKernel>(l, partial, (const float*)ptr<float>(dweights),
                                                 (const float*)ptr<float>(probs),
                                                 (const int32_t*)ptr<int32_t>(idx), d, chunk);
  dispatch<float, bf16, double>(dscale, "router_backward", [&]<class W>() {
    p.template launch<kern::AddColumnPartialsKernel>(stride_launch(E), ptr<W>(dscale),
                                                     (const float*)partial, chunks, E, 1.0);
  });
  dispatch<float, bf16>(dlogits, "router_backward", [&]<class E_>() {
    dispatch<float, bf16, double>(scale, "router_backward", [&]<class W>() {
      p.template launch<kern::RouterBackwardKernel>(
          warps_launch(T), ptr<E_>(dlogits), (const float*)ptr<float>(dweights),
          (const float*)ptr<float>(probs), (const int32_t*)ptr<int32_t>(idx),
          (const W*)ptr<W>(scale), (const float*)ptr<float>(lb_dprobs), seq, d);
    });
  });
}

template <class P>
void load_balance_forward(P& p, const LoadBalanceForwardArgs& args, TopKDims dims) {
  const auto& [density, loss, probs, idx, seq, coefficient] = args;
  const int64_t T = dims.T, E = dims.E, K = dims.K;
  check_stat(probs, "load_balance_forward");
  check_stat(density, "load_balance_forward");
  if (loss.defined()) check_scalar(loss, "load_balance_forward");
  const int64_t B = T / seq;
  if (B == 0) return;
  Scratch s = p.scratch();
  const int64_t chunk = 512, chunks = kern::ceil_div(seq, chunk);
  int32_t* hits = s.take<int32_t>(B * chunks * E, "the load-balance counts");
  float* psum = s.take<float>(B * chunks * E, "the load-balance sums");
  Launch l;
  l.gx = uint32_t(chunks);
  l.gy = uint32_t(B);
  l.threads = 256;
  l.smem = size_t(E) * 4;
  p.template launch<kern::LoadBalancePartialKernel>(l, hits, psum, (const float*)ptr<float>(probs),
                                                    (const int32_t*)ptr<int32_t>(idx), seq, E, K,
                                                    chunk);
  Launch one;
  one.threads = 256;
  one.smem = 8 * sizeof(double);
  p.template launch<kern::LoadBalanceFinalKernel>(one, ptr<float>(density), ptr<double>(loss),
                                                  (const int32_t*)hits, (const float*)psum, B, E,
                                                  chunks, seq, coefficient);
}

template <class P>
void route_sort(P& p, const RouteSortArgs& args, NoDims) {
  const auto& [r, idx, num_experts] = args;
  const int64_t n = idx.numel();
  GEMMAX_CHECK(num_experts <= kern::kMaxBins, "cuda backend: route_sort sorts up to ",
               kern::kMaxBins, " experts, got ", num_experts);
  if (n == 0) {
    fill(p, FillArgs{.x = r.group_sizes, .value = 0.0}, {});
    return;
  }
  Scratch s = p.scratch();
  stable_sort(p, s, ptr<int32_t>(idx), n, int(num_experts), false, 1, ptr<int32_t>(r.order),
              ptr<int32_t>(r.group_sizes));
  p.template launch<kern::RouteMapsKernel>(stride_launch(n), (const int32_t*)ptr<int32_t>(r.order),
                                           n, idx.dim(-1), ptr<int32_t>(r.inverse),
                                           ptr<int32_t>(r.token));
}

template <class P>
void permute(P& p, const PermuteArgs& args, NoDims) {
  const auto& [xs, x, order, k] = args;
  const int64_t rows = order.numel(), d = x.dim(-1);
  if (rows == 0) return;
  dispatch<float, bf16>(x, "permute", [&]<class E>() {
    p.template launch<kern::PermuteKernel>(row_blocks(rows), ptr<E>(xs), (const E*)ptr<E>(x),
                                           (const int32_t*)ptr<int32_t>(order), rows, k, d,
                                           vec_ok<E>(d, {&xs, &x}));
  });
}

template <class P>
void permute_backward(P& p, const PermuteBackwardArgs& args, TokenCopyDims dims) {
  const auto& [dx, dxs, inverse, k, accumulate] = args;
  const int64_t d = dims.d, T = dims.T;
  if (T == 0) return;
  dispatch<float, bf16>(dx, "permute_backward", [&]<class E>() {
    p.template launch<kern::PermuteBackwardKernel>(row_blocks(T), ptr<E>(dx), (const E*)ptr<E>(dxs),
                                                   (const int32_t*)ptr<int32_t>(inverse), T, k, d,
                                                   accumulate, vec_ok<E>(d, {&dx, &dxs}));
  });
}

template <class P>
void combine_forward(P& p, const CombineForwardArgs& args, TokenCopyDims dims) {
  const auto& [m, y, inverse, weights] = args;
  const int64_t d = dims.d, T = dims.T, K = dims.K;
  check_stat(weights, "combine_forward");
  if (T == 0) return;
  dispatch<float, bf16>(m, "combine_forward", [&]<class E>() {
    p.template launch<kern::CombineForwardKernel>(row_blocks(T), ptr<E>(m), (const E*)ptr<E>(y),
                                                  (const int32_t*)ptr<int32_t>(inverse),
                                                  (const float*)ptr<float>(weights), T, K, d,
                                                  vec_ok<E>(d, {&m, &y}));
  });
}

template <class P>
void combine_backward(P& p, const CombineBackwardArgs& args, TokenCopyDims dims) {
  const auto& [dy, dweights, dm, y, order, weights] = args;
  const int64_t d = dims.d, rows = weights.numel(), K = dims.K;
  check_stat(weights, "combine_backward");
  check_stat(dweights, "combine_backward");
  if (rows == 0) return;
  dispatch<float, bf16>(dm, "combine_backward", [&]<class E>() {
    p.template launch<kern::CombineBackwardKernel>(
        row_blocks(rows), ptr<E>(dy), ptr<float>(dweights), (const E*)ptr<E>(dm),
        (const E*)ptr<E>(y), (const int32_t*)ptr<int32_t>(order), (const float*)ptr<float>(weights),
        rows, K, d, vec_ok<E>(d, {&dy, &dm, &y}));
  });
}

}  // namespace gemmax::cuda::ops

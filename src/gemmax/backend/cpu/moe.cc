// The MoE layer's ops other than its products and GeGLU: the router (softmax, top-k,
// renormalisation, per-expert scale), the load-balance statistics, the sort by expert, and
// permute / combine with their backward. Rows run in parallel; every sum across rows runs in
// a fixed order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"

namespace gemmax {
using namespace cpu;

// ---- router ----------------------------------------------------------------------------------

void CpuBackend::do_router_forward(const RouterForwardArgs& args, TopKDims dims) {
  const auto& [probs, idx, weights, logits, per_expert_scale, renormalize] = args;
  if (is_wide(logits)) return reference_.do_router_forward(args, dims);
  const int64_t T_ = dims.T, E = dims.E, K = dims.K;
  GEMMAX_CHECK(probs.numel() == T_ * E && idx.dim(0) == T_ && weights.numel() == T_ * K &&
                   per_expert_scale.numel() == E && K <= E,
               "router_forward shapes: logits ", logits.str(), " probs ", probs.str(), " idx ",
               idx.str(), " weights ", weights.str());
  std::vector<float> pes(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) pes[size_t(e)] = float(get_as_double(per_expert_scale, e));
  int32_t* pidx = idx.data<int32_t>();
  float* pp = probs.data<float>();
  float* pw = weights.data<float>();
  dispatch<float, bf16>(logits, "router_forward", [&]<class T>() {
    const T* pl = logits.data<T>();
#pragma omp parallel
    {
      std::vector<float> l(static_cast<size_t>(E));
#pragma omp for
      for (int64_t t = 0; t < T_; ++t) {
        float mx = -INFINITY;
        for (int64_t e = 0; e < E; ++e) {
          l[size_t(e)] = to_f32(pl[t * E + e]);
          mx = std::max(mx, l[size_t(e)]);
        }
        float* p = pp + t * E;
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) {
          p[e] = exp_approx(l[size_t(e)] - mx);
          sum += p[e];
        }
        const float inv = float(1.0 / sum);
        for (int64_t e = 0; e < E; ++e) p[e] *= inv;
        // Top-k of the logits, largest first; equal logits keep the lower expert id first.
        int32_t* top = pidx + t * K;
        int64_t found = 0;
        for (int64_t e = 0; e < E; ++e) {
          int64_t at = found;
          while (at > 0 && l[size_t(e)] > l[size_t(top[at - 1])]) --at;
          if (at >= K) continue;
          for (int64_t j = std::min(found, K - 1); j > at; --j) top[j] = top[j - 1];
          top[at] = int32_t(e);
          found = std::min(found + 1, K);
        }
        double chosen = 0;
        for (int64_t j = 0; j < K; ++j) chosen += p[top[j]];
        for (int64_t j = 0; j < K; ++j)
          pw[t * K + j] =
              float(double(p[top[j]]) / (renormalize ? chosen : 1.0) * double(pes[size_t(top[j])]));
      }
    }
  });
}

void CpuBackend::do_router_backward(const RouterBackwardArgs& args, TopKDims dims) {
  const auto& [dlogits, dper_expert_scale, dweights, probs, idx, per_expert_scale, renormalize,
               lb_dprobs, seq] = args;
  if (is_wide(dlogits)) return reference_.do_router_backward(args, dims);
  const int64_t T_ = dims.T, E = dims.E, K = dims.K;
  const int32_t* pidx = idx.data<int32_t>();
  const float* pp = probs.data<float>();
  const float* pdw = dweights.data<float>();
  const float* plb = lb_dprobs.defined() ? lb_dprobs.data<float>() : nullptr;
  std::vector<double> pes(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) pes[size_t(e)] = get_as_double(per_expert_scale, e);
  // With u = p[idx], sigma = sum u, n = u / sigma, w = n * s:
  //   ds_k = dw_k n_k;  dn_k = dw_k s_k;  du_k = (dn_k - sum_j dn_j n_j) / sigma.
  std::vector<double> des(static_cast<size_t>(E), 0.0);
  for (int64_t t = 0; t < T_; ++t) {  // in token order: tokens add into one expert's scale
    double sigma = 0;
    for (int64_t j = 0; j < K; ++j) sigma += pp[t * E + pidx[t * K + j]];
    if (!renormalize) sigma = 1.0;
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = pidx[t * K + j];
      des[size_t(e)] += double(pdw[t * K + j]) * double(pp[t * E + e]) / sigma;
    }
  }
  for (int64_t e = 0; e < E; ++e)
    set_from_double(dper_expert_scale, e, get_as_double(dper_expert_scale, e) + des[size_t(e)]);
  dispatch<float, bf16>(dlogits, "router_backward", [&]<class T>() {
    T* pdl = dlogits.data<T>();
#pragma omp parallel
    {
      std::vector<float> dp(static_cast<size_t>(E));
#pragma omp for
      for (int64_t t = 0; t < T_; ++t) {
        const float* pt = pp + t * E;
        for (int64_t e = 0; e < E; ++e) dp[size_t(e)] = plb ? plb[(t / seq) * E + e] : 0.0f;
        double sigma = 0;
        for (int64_t j = 0; j < K; ++j) sigma += pt[pidx[t * K + j]];
        if (renormalize) {
          double dot_dn_n = 0;
          for (int64_t j = 0; j < K; ++j) {
            const int32_t e = pidx[t * K + j];
            dot_dn_n += double(pdw[t * K + j]) * pes[size_t(e)] * double(pt[e]) / sigma;
          }
          for (int64_t j = 0; j < K; ++j) {
            const int32_t e = pidx[t * K + j];
            dp[size_t(e)] += float((double(pdw[t * K + j]) * pes[size_t(e)] - dot_dn_n) / sigma);
          }
        } else {
          for (int64_t j = 0; j < K; ++j) {
            const int32_t e = pidx[t * K + j];
            dp[size_t(e)] += float(double(pdw[t * K + j]) * pes[size_t(e)]);
          }
        }
        float dot_dp_p = 0;  // softmax backward: dlogit_e = p_e (dp_e - sum dp p)
        for (int64_t e = 0; e < E; ++e) dot_dp_p += dp[size_t(e)] * pt[e];
        for (int64_t e = 0; e < E; ++e)
          pdl[t * E + e] = from_f32<T>(pt[e] * (dp[size_t(e)] - dot_dp_p));
      }
    }
  });
}

void CpuBackend::do_load_balance_forward(const LoadBalanceForwardArgs& args, TopKDims dims) {
  const auto& [density, loss, probs, idx, seq, coefficient] = args;
  if (is_wide(probs)) return reference_.do_load_balance_forward(args, dims);
  const int64_t T_ = dims.T, E = dims.E, K = dims.K, B = T_ / seq;
  const int32_t* pidx = idx.data<int32_t>();
  const float* pp = probs.data<float>();
  float* pd = density.data<float>();
  std::vector<double> per_seq(static_cast<size_t>(B), 0.0);
#pragma omp parallel for if (B > 1)
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> hits(static_cast<size_t>(E), 0.0), pbar(size_t(E), 0.0);
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t t = b * seq + s;
      for (int64_t j = 0; j < K; ++j) hits[size_t(pidx[t * K + j])] += 1.0;
      for (int64_t e = 0; e < E; ++e) pbar[size_t(e)] += pp[t * E + e];
    }
    double total = 0;
    for (int64_t e = 0; e < E; ++e) {
      pd[b * E + e] = float(hits[size_t(e)] / double(seq));
      total += (hits[size_t(e)] / double(seq)) * (pbar[size_t(e)] / double(seq));
    }
    per_seq[size_t(b)] = total;
  }
  if (!loss.defined()) return;
  double total = 0;
  for (double v : per_seq) total += v;
  add_to_scalar(loss, coefficient * total / double(B * E));
}

// ---- dispatch --------------------------------------------------------------------------------

void CpuBackend::do_route_sort(const RouteSortArgs& args, NoDims) {
  reference_.do_route_sort(args, {});  // a serial counting sort: stable
}

void CpuBackend::do_permute(const PermuteArgs& args, NoDims) {
  const auto& [xs, x, order, k] = args;
  if (is_wide(x)) return reference_.do_permute(args, {});
  const int64_t rows = order.numel(), d = x.dim(-1);
  const int32_t* po = order.data<int32_t>();
  const size_t row_bytes = size_t(d) * dtype_size(x.dtype());
  const char* px = static_cast<const char*>(x.raw());
  char* pxs = static_cast<char*>(xs.raw());
#pragma omp parallel for if (rows > kParallelRows)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(pxs + size_t(r) * row_bytes, px + size_t(po[r] / k) * row_bytes, row_bytes);
}

void CpuBackend::do_permute_backward(const PermuteBackwardArgs& args, TokenCopyDims dims) {
  const auto& [dx, dxs, inverse, k, accumulate] = args;
  if (is_wide(dx)) return reference_.do_permute_backward(args, dims);
  const int64_t d = dims.d, T_ = dims.T;
  const int32_t* inv = inverse.defined() ? inverse.data<int32_t>() : nullptr;
  dispatch<float, bf16>(dx, "permute_backward", [&]<class T>() {
    const T* g = dxs.data<T>();
    T* out = dx.data<T>();
#pragma omp parallel
    {
      std::vector<float> acc(static_cast<size_t>(d));
#pragma omp for
      for (int64_t t = 0; t < T_; ++t) {
        T* o = out + t * d;
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) acc[size_t(c)] = accumulate ? to_f32(o[c]) : 0.0f;
        for (int64_t j = 0; j < k; ++j) {
          const T* src = g + (inv ? int64_t(inv[t * k + j]) : t * k + j) * d;
#pragma omp simd
          for (int64_t c = 0; c < d; ++c) acc[size_t(c)] += to_f32(src[c]);
        }
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) o[c] = from_f32<T>(acc[size_t(c)]);
      }
    }
  });
}

void CpuBackend::do_combine_forward(const CombineForwardArgs& args, TokenCopyDims dims) {
  const auto& [m, y, inverse, weights] = args;
  if (is_wide(m)) return reference_.do_combine_forward(args, dims);
  const int64_t d = dims.d, T_ = dims.T, K = dims.K;
  const int32_t* inv = inverse.defined() ? inverse.data<int32_t>() : nullptr;
  const float* pw = weights.data<float>();
  dispatch<float, bf16>(m, "combine_forward", [&]<class T>() {
    const T* py = y.data<T>();
    T* pm = m.data<T>();
#pragma omp parallel
    {
      std::vector<float> acc(static_cast<size_t>(d));
#pragma omp for
      for (int64_t t = 0; t < T_; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < K; ++j) {
          const T* src = py + (inv ? int64_t(inv[t * K + j]) : t * K + j) * d;
          const float w = pw[t * K + j];
#pragma omp simd
          for (int64_t c = 0; c < d; ++c) acc[size_t(c)] += w * to_f32(src[c]);
        }
        T* o = pm + t * d;
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) o[c] = from_f32<T>(acc[size_t(c)]);
      }
    }
  });
}

void CpuBackend::do_combine_backward(const CombineBackwardArgs& args, TokenCopyDims dims) {
  const auto& [dy, dweights, dm, y, order, weights] = args;
  if (is_wide(dm)) return reference_.do_combine_backward(args, dims);
  const int64_t d = dims.d, rows = weights.numel(), K = dims.K;
  const int32_t* po = order.defined() ? order.data<int32_t>() : nullptr;
  const float* pw = weights.data<float>();
  float* pdw = dweights.data<float>();
  dispatch<float, bf16>(dm, "combine_backward", [&]<class T>() {
    const T *pdm = dm.data<T>(), *py = y.data<T>();
    T* pdy = dy.data<T>();
#pragma omp parallel for if (rows > kParallelRows)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t tk = po ? po[r] : r, t = tk / K;
      const float w = pw[tk];
      const T *g = pdm + t * d, *yr = py + r * d;
      T* o = pdy + r * d;
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < d; ++c) {
        o[c] = from_f32<T>(w * to_f32(g[c]));
        s += to_f32(g[c]) * to_f32(yr[c]);
      }
      pdw[tk] = s;
    }
  });
}

}  // namespace gemmax

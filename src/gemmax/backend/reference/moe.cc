// MoE routing: router softmax/top-k/renormalisation, load-balance statistics, the sort of
// token copies by expert, permute and the weighted combine. Each op's backward is beside it.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {
using ref::stat_t;

void ReferenceBackend::do_router_forward(const RouterForwardArgs& args, TopKDims dims) {
  const auto& [probs, idx, weights, logits, per_expert_scale, renormalize] = args;
  const int64_t T_ = dims.T, E = dims.E, K = dims.K;
  int32_t* pidx = idx.data<int32_t>();
  const std::vector<double> pes = ref::read_vector(per_expert_scale);  // fp32 master weights
  dispatch<float, bf16, double>(logits, "router_forward", [&]<class T>() {
    const T* pl = logits.data<T>();
    stat_t<T>* pp = probs.data<stat_t<T>>();
    stat_t<T>* pw = weights.data<stat_t<T>>();
#pragma omp parallel
    {
      std::vector<int32_t> order(E);
#pragma omp for
      for (int64_t t = 0; t < T_; ++t) {
        const T* lt = pl + t * E;
        double mx = double(lt[0]);
        for (int64_t e = 1; e < E; ++e) mx = std::max(mx, double(lt[e]));
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) sum += std::exp(double(lt[e]) - mx);
        for (int64_t e = 0; e < E; ++e)
          pp[t * E + e] = stat_t<T>(std::exp(double(lt[e]) - mx) / sum);
        // Top-k of the logits; equal logits keep the lower expert id first.
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t b) {
          const double la = double(lt[a]), lb = double(lt[b]);
          return la > lb || (la == lb && a < b);
        });
        double chosen = 0;
        for (int64_t j = 0; j < K; ++j) chosen += double(pp[t * E + order[j]]);
        for (int64_t j = 0; j < K; ++j) {
          const int32_t e = order[j];
          pidx[t * K + j] = e;
          const double n = double(pp[t * E + e]) / (renormalize ? chosen : 1.0);
          pw[t * K + j] = stat_t<T>(n * pes[e]);
        }
      }
    }
  });
}

void ReferenceBackend::do_router_backward(const RouterBackwardArgs& args, TopKDims dims) {
  const auto& [dlogits, dper_expert_scale, dweights, probs, idx, per_expert_scale, renormalize,
               lb_dprobs, seq] = args;
  const int64_t T_ = dims.T, E = dims.E, K = dims.K;
  const int32_t* pidx = idx.data<int32_t>();
  const std::vector<double> pes = ref::read_vector(per_expert_scale);
  dispatch<float, bf16, double>(dlogits, "router_backward", [&]<class T>() {
    const stat_t<T>* pp = probs.data<stat_t<T>>();
    const stat_t<T>* pdw = dweights.data<stat_t<T>>();
    const stat_t<T>* plb = lb_dprobs.defined() ? lb_dprobs.data<stat_t<T>>() : nullptr;
    T* pdl = dlogits.data<T>();
    // With u = p[idx], sigma = sum u, n = u / sigma, w = n * s:
    //   ds_k = dw_k n_k;  dn_k = dw_k s_k;  du_k = (dn_k - sum_j dn_j n_j) / sigma.
    std::vector<double> des(E, 0.0);
    for (int64_t t = 0; t < T_; ++t) {  // serial: tokens add into the same expert's scale
      double sigma = 0;
      for (int64_t j = 0; j < K; ++j) sigma += double(pp[t * E + pidx[t * K + j]]);
      if (!renormalize) sigma = 1.0;
      for (int64_t j = 0; j < K; ++j) {
        const int32_t e = pidx[t * K + j];
        des[e] += double(pdw[t * K + j]) * double(pp[t * E + e]) / sigma;
      }
    }
    ref::accumulate_vector(dper_expert_scale, des);  // in the weights' dtype
#pragma omp parallel
    {
      std::vector<double> dp(E);
#pragma omp for
      for (int64_t t = 0; t < T_; ++t) {
        const stat_t<T>* pt = pp + t * E;
        for (int64_t e = 0; e < E; ++e) dp[e] = plb ? double(plb[(t / seq) * E + e]) : 0.0;
        double sigma = 0;
        for (int64_t j = 0; j < K; ++j) sigma += double(pt[pidx[t * K + j]]);
        if (renormalize) {
          double dot_dn_n = 0;
          for (int64_t j = 0; j < K; ++j) {
            const int32_t e = pidx[t * K + j];
            dot_dn_n += double(pdw[t * K + j]) * pes[e] * double(pt[e]) / sigma;
          }
          for (int64_t j = 0; j < K; ++j) {
            const int32_t e = pidx[t * K + j];
            dp[e] += (double(pdw[t * K + j]) * pes[e] - dot_dn_n) / sigma;
          }
        } else {
          for (int64_t j = 0; j < K; ++j) {
            const int32_t e = pidx[t * K + j];
            dp[e] += double(pdw[t * K + j]) * pes[e];
          }
        }
        double dot_dp_p = 0;  // softmax backward: dlogit_e = p_e (dp_e - sum dp p)
        for (int64_t e = 0; e < E; ++e) dot_dp_p += dp[e] * double(pt[e]);
        for (int64_t e = 0; e < E; ++e) pdl[t * E + e] = T(double(pt[e]) * (dp[e] - dot_dp_p));
      }
    }
  });
}

void ReferenceBackend::do_load_balance_forward(const LoadBalanceForwardArgs& args, TopKDims dims) {
  const auto& [density, loss, probs, idx, seq, coefficient] = args;
  const int64_t T_ = dims.T, E = dims.E, K = dims.K, B = T_ / seq;
  const int32_t* pidx = idx.data<int32_t>();
  double total = 0;
  dispatch<float, bf16, double>(probs, "load_balance_forward", [&]<class S>() {
    const S* pp = probs.data<S>();
    S* pd = density.data<S>();
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> hits(E, 0.0), pbar(E, 0.0);
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t t = b * seq + s;
        for (int64_t j = 0; j < K; ++j) hits[pidx[t * K + j]] += 1.0;
        for (int64_t e = 0; e < E; ++e) pbar[e] += double(pp[t * E + e]);
      }
      for (int64_t e = 0; e < E; ++e) {
        pd[b * E + e] = S(hits[e] / double(seq));
        total += (hits[e] / double(seq)) * (pbar[e] / double(seq));
      }
    }
  });
  if (loss.defined()) ref::add_to_scalar(loss, coefficient * total / double(B * E));
}

void ReferenceBackend::do_route_sort(const RouteSortArgs& args, NoDims) {
  const auto& [routing, idx, num_experts] = args;
  const int64_t n = idx.numel();
  const int32_t* pidx = idx.data<int32_t>();
  int32_t* sizes = routing.group_sizes.data<int32_t>();
  std::fill_n(sizes, num_experts, 0);
  for (int64_t i = 0; i < n; ++i) {
    GEMMAX_CHECK(pidx[i] >= 0 && pidx[i] < num_experts, "expert id ", pidx[i], " out of range");
    ++sizes[pidx[i]];
  }
  // Counting sort: stable, so the copies of one expert keep token order.
  std::vector<int64_t> next(num_experts, 0);
  for (int64_t e = 1; e < num_experts; ++e) next[e] = next[e - 1] + sizes[e - 1];
  int32_t* order = routing.order.data<int32_t>();
  int32_t* inverse = routing.inverse.data<int32_t>();
  int32_t* token = routing.token.data<int32_t>();
  const int64_t k = idx.dim(-1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = next[pidx[i]]++;
    order[r] = int32_t(i);
    inverse[i] = int32_t(r);
    token[r] = int32_t(i / k);
  }
}

void ReferenceBackend::do_permute(const PermuteArgs& args, NoDims) {
  const auto& [xs, x, order, k] = args;
  const int64_t rows = order.numel(), d = x.dim(-1);
  const int32_t* po = order.data<int32_t>();
  dispatch<float, bf16, double>(x, "permute", [&]<class T>() {
    const T* px = x.data<T>();
    T* pxs = xs.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) std::copy_n(px + (po[r] / k) * d, d, pxs + r * d);
  });
}

void ReferenceBackend::do_permute_backward(const PermuteBackwardArgs& args, TokenCopyDims dims) {
  const auto& [dx, dxs, inverse, k, accumulate] = args;
  const int64_t d = dims.d, T_ = dims.T;
  const int32_t* inv = inverse.defined() ? inverse.data<int32_t>() : nullptr;
  dispatch<float, bf16, double>(dx, "permute_backward", [&]<class T>() {
    const T* g = dxs.data<T>();
    T* out = dx.data<T>();
#pragma omp parallel for
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t c = 0; c < d; ++c) {
        double s = accumulate ? double(out[t * d + c]) : 0.0;
        for (int64_t j = 0; j < k; ++j) s += double(g[(inv ? inv[t * k + j] : t * k + j) * d + c]);
        out[t * d + c] = T(s);
      }
  });
}

void ReferenceBackend::do_combine_forward(const CombineForwardArgs& args, TokenCopyDims dims) {
  const auto& [m, y, inverse, weights] = args;
  const int64_t d = dims.d, T_ = dims.T, K = dims.K;
  const int32_t* inv = inverse.defined() ? inverse.data<int32_t>() : nullptr;
  dispatch<float, bf16, double>(m, "combine_forward", [&]<class T>() {
    const T* py = y.data<T>();
    const stat_t<T>* pw = weights.data<stat_t<T>>();
    T* pm = m.data<T>();
#pragma omp parallel for
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t c = 0; c < d; ++c) {
        double s = 0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t r = inv ? inv[t * K + j] : t * K + j;
          s += double(pw[t * K + j]) * double(py[r * d + c]);
        }
        pm[t * d + c] = T(s);
      }
  });
}

void ReferenceBackend::do_combine_backward(const CombineBackwardArgs& args, TokenCopyDims dims) {
  const auto& [dy, dweights, dm, y, order, weights] = args;
  const int64_t d = dims.d, rows = weights.numel(), K = dims.K;
  const int32_t* po = order.defined() ? order.data<int32_t>() : nullptr;
  dispatch<float, bf16, double>(dm, "combine_backward", [&]<class T>() {
    const T *pdm = dm.data<T>(), *py = y.data<T>();
    const stat_t<T>* pw = weights.data<stat_t<T>>();
    T* pdy = dy.data<T>();
    stat_t<T>* pdw = dweights.data<stat_t<T>>();
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t tk = po ? po[r] : r, t = tk / K;
      const double w = double(pw[tk]);
      double s = 0;
      for (int64_t c = 0; c < d; ++c) {
        pdy[r * d + c] = T(w * double(pdm[t * d + c]));
        s += double(pdm[t * d + c]) * double(py[r * d + c]);
      }
      pdw[tk] = stat_t<T>(s);
    }
  });
}

}  // namespace gemmax

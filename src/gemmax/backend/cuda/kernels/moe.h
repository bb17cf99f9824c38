// MoE routing: router softmax / top-k / renormalisation, its backward, the load-balance
// statistics, and the row gathers of permute and combine.
#pragma once

#include "gemmax/backend/cuda/kernels/elementwise.h"

namespace gemmax::kern {

constexpr int kMaxExpertsPerLane = 16;  // up to 512 experts

struct RouterDims {
  int64_t T, E, K;
  bool renormalize;
};

// One warp per token: lane l holds experts l, l + 32, ....
struct RouterForwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class W>
  GEMMAX_KFN void operator()(X& x, float* probs, int32_t* idx, float* weights, const E* logits,
                             const W* expert_scale, RouterDims d) const {
    const int lane = x.lane(), warps = x.nthreads() / kWarp;
    for (int64_t t = int64_t(x.bx()) * warps + x.tid() / kWarp; t < d.T;
         t += int64_t(x.gx()) * warps) {
      float l[kMaxExpertsPerLane];
      bool taken[kMaxExpertsPerLane];
      float mx = kNegInf;
      GEMMAX_UNROLL
      for (int u = 0; u < kMaxExpertsPerLane; ++u) {
        const int64_t e = lane + 32 * u;
        l[u] = e < d.E ? to_acc(logits[t * d.E + e]) : kNegInf;
        taken[u] = e >= d.E;
        mx = kmax(mx, l[u]);
      }
      mx = warp_max(x, mx);
      float sum = 0;
      GEMMAX_UNROLL
      for (int u = 0; u < kMaxExpertsPerLane; ++u)
        sum += lane + 32 * u < d.E ? kexp(l[u] - mx) : 0.0f;
      sum = warp_sum(x, sum);
      GEMMAX_UNROLL
      for (int u = 0; u < kMaxExpertsPerLane; ++u)
        if (lane + 32 * u < d.E) probs[t * d.E + lane + 32 * u] = kexp(l[u] - mx) / sum;
      // Top-k of the logits, one warp argmax per pick; equal logits: the lower id first.
      float chosen = 0;
      int32_t pick[32];
      float pick_prob[32];  // as stored in probs[]: lane 0 must not read what other lanes wrote
      for (int64_t j = 0; j < d.K; ++j) {
        float best = kNegInf;
        int32_t id = 1 << 30;
        GEMMAX_UNROLL
        for (int u = 0; u < kMaxExpertsPerLane; ++u)
          if (!taken[u] && (l[u] > best || id == (1 << 30))) {
            best = l[u];
            id = lane + 32 * u;
          }
        for (int m = 16; m > 0; m >>= 1) {
          const float ob = x.shfl_xor(best, m);
          const int32_t oid = x.shfl_xor(id, m);
          if (ob > best || (ob == best && oid < id)) {
            best = ob;
            id = oid;
          }
        }
        GEMMAX_UNROLL
        for (int u = 0; u < kMaxExpertsPerLane; ++u)
          if (lane + 32 * u == id) taken[u] = true;
        pick[j] = id;
        pick_prob[j] = kexp(best - mx) / sum;  // the probability as stored, on every lane
        chosen += pick_prob[j];
      }
      if (lane == 0)
        for (int64_t j = 0; j < d.K; ++j) {
          const int32_t e = pick[j];
          const float p = pick_prob[j];
          idx[t * d.K + j] = e;
          weights[t * d.K + j] = float(double(p) / (d.renormalize ? double(chosen) : 1.0) *
                                       double(to_acc(expert_scale[e])));
        }
    }
  }
};

// dlogits from dweights through the renormalisation and the per-expert scale, plus the
// load-balance gradient lb[t / seq] (may be null); one warp per token.
struct RouterBackwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class W>
  GEMMAX_KFN void operator()(X& x, E* dlogits, const float* dweights, const float* probs,
                             const int32_t* idx, const W* expert_scale, const float* lb,
                             int64_t seq, RouterDims d) const {
    const int lane = x.lane(), warps = x.nthreads() / kWarp;
    for (int64_t t = int64_t(x.bx()) * warps + x.tid() / kWarp; t < d.T;
         t += int64_t(x.gx()) * warps) {
      const float* p = probs + t * d.E;
      float dp[kMaxExpertsPerLane];
      GEMMAX_UNROLL
      for (int u = 0; u < kMaxExpertsPerLane; ++u) {
        const int64_t e = lane + 32 * u;
        dp[u] = lb && e < d.E ? lb[(t / seq) * d.E + e] : 0.0f;
      }
      float sigma = 0, dot_dn_n = 0;
      for (int64_t j = 0; j < d.K; ++j) sigma += p[idx[t * d.K + j]];
      if (!d.renormalize) sigma = 1.0f;
      if (d.renormalize)
        for (int64_t j = 0; j < d.K; ++j) {
          const int32_t e = idx[t * d.K + j];
          dot_dn_n += dweights[t * d.K + j] * float(to_acc(expert_scale[e])) * p[e] / sigma;
        }
      for (int64_t j = 0; j < d.K; ++j) {
        const int32_t e = idx[t * d.K + j];
        const float dn = dweights[t * d.K + j] * float(to_acc(expert_scale[e]));
        GEMMAX_UNROLL
        for (int u = 0; u < kMaxExpertsPerLane; ++u)
          if (lane + 32 * u == e) dp[u] += d.renormalize ? (dn - dot_dn_n) / sigma : dn;
      }
      float dot = 0;
      GEMMAX_UNROLL
      for (int u = 0; u < kMaxExpertsPerLane; ++u)
        dot += lane + 32 * u < d.E ? dp[u] * p[lane + 32 * u] : 0.0f;
      dot = warp_sum(x, dot);
      GEMMAX_UNROLL
      for (int u = 0; u < kMaxExpertsPerLane; ++u) {
        const int64_t e = lane + 32 * u;
        if (e < d.E) dlogits[t * d.E + e] = from_acc<E>(p[e] * (dp[u] - dot));
      }
    }
  }
};

// partial[block][e] = sum over the block's tokens of dweights * p / sigma for the chosen e (the
// gradient of the per-expert scale). Block b takes tokens [b * chunk, ...); warp w of it the
// tokens w, w + warps, ... in order, into its own row of shared memory, summed in warp order.
struct RouterScaleGradKernel {
  static constexpr int kMaxThreads = 128;
  template <class X>
  GEMMAX_KFN void operator()(X& x, float* partial, const float* dweights, const float* probs,
                             const int32_t* idx, RouterDims d, int64_t chunk) const {
    const int warps = x.nthreads() / kWarp, warp = x.tid() / kWarp, lane = x.lane();
    float* acc = x.template smem<float>();  // [warps][E]
    for (int64_t e = x.tid(); e < warps * d.E; e += x.nthreads()) acc[e] = 0;
    x.sync();
    const int64_t t0 = int64_t(x.bx()) * chunk, t1 = kmin(d.T, t0 + chunk);
    for (int64_t t = t0 + warp; t < t1; t += warps) {
      float sigma = 1.0f;
      if (d.renormalize) {
        sigma = 0;
        for (int64_t j = 0; j < d.K; ++j) sigma += probs[t * d.E + idx[t * d.K + j]];
      }
      for (int64_t j = lane; j < d.K; j += 32) {  // the chosen experts of a token are distinct
        const int32_t e = idx[t * d.K + j];
        acc[warp * d.E + e] += dweights[t * d.K + j] * probs[t * d.E + e] / sigma;
      }
      x.syncwarp();
    }
    x.sync();
    for (int64_t e = x.tid(); e < d.E; e += x.nthreads()) {
      float s = 0;
      for (int w = 0; w < warps; ++w) s += acc[w * d.E + e];
      partial[int64_t(x.bx()) * d.E + e] = s;
    }
  }
};

// Load balance, per (sequence b, chunk c of its tokens): hits[b][c][e] and psum[b][c][e].
struct LoadBalancePartialKernel {
  static constexpr int kMaxThreads = 256;
  template <class X>
  GEMMAX_KFN void operator()(X& x, int32_t* hits, float* psum, const float* probs,
                             const int32_t* idx, int64_t seq, int64_t E, int64_t K,
                             int64_t chunk) const {
    const int64_t b = x.by(), c = x.bx(), chunks = x.gx();
    int32_t* h = x.template smem<int32_t>();
    for (int64_t e = x.tid(); e < E; e += x.nthreads()) h[e] = 0;
    x.sync();
    const int64_t s0 = c * chunk, s1 = kmin(seq, s0 + chunk);
    for (int64_t q = s0 * K + x.tid(); q < s1 * K; q += x.nthreads())
      x.atomic_add(&h[idx[b * seq * K + q]], 1);
    x.sync();
    for (int64_t e = x.tid(); e < E; e += x.nthreads()) {
      float s = 0;
      for (int64_t t = s0; t < s1; ++t) s += probs[(b * seq + t) * E + e];
      hits[(b * chunks + c) * E + e] = h[e];
      psum[(b * chunks + c) * E + e] = s;
    }
  }
};

// density[b][e] = hits / seq; loss[0] += coefficient * mean_{b,e}(density * mean_s p). One block.
struct LoadBalanceFinalKernel {
  static constexpr int kMaxThreads = 256;
  template <class X>
  GEMMAX_KFN void operator()(X& x, float* density, double* loss, const int32_t* hits,
                             const float* psum, int64_t B, int64_t E, int64_t chunks, int64_t seq,
                             double coefficient) const {
    double total = 0;
    for (int64_t be = x.tid(); be < B * E; be += x.nthreads()) {
      const int64_t b = be / E, e = be % E;
      int64_t n = 0;
      double p = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        n += hits[(b * chunks + c) * E + e];
        p += double(psum[(b * chunks + c) * E + e]);
      }
      const double dens = double(n) / double(seq);
      density[be] = float(dens);
      total += dens * (p / double(seq));
    }
    total = group_sum(x, total, x.nthreads(), x.template smem<double>());
    if (loss && x.tid() == 0) loss[0] += coefficient * total / double(B * E);
  }
};

// ---- row gathers (one block per row, grid-stride) -------------------------------------------
// Each thread takes W consecutive columns at a time: kVec<E> (16 bytes per access) when the op
// layer found every row length and address allows it (`vec`), else 1. The sums per element run
// in the same order either way.

// xs[r] = x[order[r] / k]
struct PermuteKernel {
  static constexpr int kMaxThreads = 128;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* xs, const E* in, const int32_t* order, int64_t rows,
                             int64_t k, int64_t d, bool vec) const {
    if (vec)
      run<kVec<E>>(x, xs, in, order, rows, k, d);
    else
      run<1>(x, xs, in, order, rows, k, d);
  }
  template <int W, class X, class E>
  GEMMAX_KFN static void run(X& x, E* xs, const E* in, const int32_t* order, int64_t rows,
                             int64_t k, int64_t d) {
    for (int64_t r = x.bx(); r < rows; r += x.gx()) {
      const E* src = in + int64_t(order[r] / k) * d;
      for (int64_t c = int64_t(x.tid()) * W; c < d; c += int64_t(x.nthreads()) * W)
        store_pack<W>(xs + r * d + c, load_pack<W>(src + c));
    }
  }
};

// dx[t] (+)= sum_j dxs[inverse[t k + j]] (inverse null: row t k + j), in j order.
struct PermuteBackwardKernel {
  static constexpr int kMaxThreads = 128;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* dx, const E* dxs, const int32_t* inverse, int64_t T,
                             int64_t k, int64_t d, bool accumulate, bool vec) const {
    if (vec)
      run<kVec<E>>(x, dx, dxs, inverse, T, k, d, accumulate);
    else
      run<1>(x, dx, dxs, inverse, T, k, d, accumulate);
  }
  template <int W, class X, class E>
  GEMMAX_KFN static void run(X& x, E* dx, const E* dxs, const int32_t* inverse, int64_t T,
                             int64_t k, int64_t d, bool accumulate) {
    for (int64_t t = x.bx(); t < T; t += x.gx())
      for (int64_t c = int64_t(x.tid()) * W; c < d; c += int64_t(x.nthreads()) * W) {
        Pack<E, W> out;
        if (accumulate) out = load_pack<W>(dx + t * d + c);
        float s[W];
        GEMMAX_UNROLL
        for (int e = 0; e < W; ++e) s[e] = accumulate ? to_acc(out.v[e]) : 0.0f;
        for (int64_t j = 0; j < k; ++j) {
          const Pack<E, W> in =
              load_pack<W>(dxs + int64_t(inverse ? inverse[t * k + j] : t * k + j) * d + c);
          GEMMAX_UNROLL
          for (int e = 0; e < W; ++e) s[e] += to_acc(in.v[e]);
        }
        GEMMAX_UNROLL
        for (int e = 0; e < W; ++e) out.v[e] = from_acc<E>(s[e]);
        store_pack<W>(dx + t * d + c, out);
      }
  }
};

// m[t] = sum_j weights[t, j] y[inverse[t K + j]] (inverse null: row t K + j).
struct CombineForwardKernel {
  static constexpr int kMaxThreads = 128;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* m, const E* y, const int32_t* inverse, const float* weights,
                             int64_t T, int64_t K, int64_t d, bool vec) const {
    if (vec)
      run<kVec<E>>(x, m, y, inverse, weights, T, K, d);
    else
      run<1>(x, m, y, inverse, weights, T, K, d);
  }
  template <int W, class X, class E>
  GEMMAX_KFN static void run(X& x, E* m, const E* y, const int32_t* inverse, const float* weights,
                             int64_t T, int64_t K, int64_t d) {
    for (int64_t t = x.bx(); t < T; t += x.gx())
      for (int64_t c = int64_t(x.tid()) * W; c < d; c += int64_t(x.nthreads()) * W) {
        float s[W] = {};
        for (int64_t j = 0; j < K; ++j) {
          const float w = weights[t * K + j];
          const Pack<E, W> in =
              load_pack<W>(y + int64_t(inverse ? inverse[t * K + j] : t * K + j) * d + c);
          GEMMAX_UNROLL
          for (int e = 0; e < W; ++e) s[e] += w * to_acc(in.v[e]);
        }
        Pack<E, W> out;
        GEMMAX_UNROLL
        for (int e = 0; e < W; ++e) out.v[e] = from_acc<E>(s[e]);
        store_pack<W>(m + t * d + c, out);
      }
  }
};

// dy[r] = w[tk] dm[tk / K]; dweights[tk] = dm[tk / K] . y[r], tk = order[r] (null: r).
struct CombineBackwardKernel {
  static constexpr int kMaxThreads = 128;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* dy, float* dweights, const E* dm, const E* y,
                             const int32_t* order, const float* weights, int64_t rows, int64_t K,
                             int64_t d, bool vec) const {
    if (vec)
      run<kVec<E>>(x, dy, dweights, dm, y, order, weights, rows, K, d);
    else
      run<1>(x, dy, dweights, dm, y, order, weights, rows, K, d);
  }
  template <int W, class X, class E>
  GEMMAX_KFN static void run(X& x, E* dy, float* dweights, const E* dm, const E* y,
                             const int32_t* order, const float* weights, int64_t rows, int64_t K,
                             int64_t d) {
    float* red = x.template smem<float>();
    for (int64_t r = x.bx(); r < rows; r += x.gx()) {
      const int64_t tk = order ? order[r] : r, t = tk / K;
      const float w = weights[tk];
      float s = 0;
      for (int64_t c = int64_t(x.tid()) * W; c < d; c += int64_t(x.nthreads()) * W) {
        const Pack<E, W> g = load_pack<W>(dm + t * d + c), yy = load_pack<W>(y + r * d + c);
        Pack<E, W> out;
        GEMMAX_UNROLL
        for (int e = 0; e < W; ++e) {
          const float ge = to_acc(g.v[e]);
          out.v[e] = from_acc<E>(w * ge);
          s += ge * to_acc(yy.v[e]);
        }
        store_pack<W>(dy + r * d + c, out);
      }
      s = group_sum(x, s, x.nthreads(), red);
      if (x.tid() == 0) dweights[tk] = s;
    }
  }
};

}  // namespace gemmax::kern

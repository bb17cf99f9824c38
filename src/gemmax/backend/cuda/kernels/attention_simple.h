// Attention on CUDA cores, fp32 arithmetic on any head_dim up to 512: the plain path (float32
// runs, and the reference for the tensor-core kernels of bfloat16 runs).
//
// Forward and dq: a block takes 16 query rows of one (sequence, head), four per warp, and walks
// the key tiles they can see (32 keys, one per lane) with an online softmax; each lane keeps the
// output columns lane, lane + 32, .... dk and dv: a block takes 16 keys of one (sequence, kv
// head) and walks every query row of the head group that sees them, recomputing the probabilities
// from the saved log-sum-exp (no atomics: each key tile is owned by one block).
#pragma once

#include "gemmax/backend/cuda/kernels/attention_tiles.h"
#include "gemmax/backend/cuda/kernels/elementwise.h"

namespace gemmax::kern {

constexpr int kAttnMaxCols = 16;  // head_dim <= 512 = 16 columns per lane

struct AttnPtrs {
  const void *q, *k, *v, *o, *dout;
  const float* lse;
  const int32_t* seg;
};

template <class E>
GEMMAX_KFN const E* row_of(const void* base, int64_t token, int64_t heads, int64_t head,
                           int64_t hd) {
  return static_cast<const E*>(base) + (token * heads + head) * hd;
}

// Loads rows [first, first + count) of a [tokens, heads, hd] tensor (one head) into shared memory
// as floats with the given row stride; rows at or past `limit` are zero.
template <class X, class E>
GEMMAX_KFN void load_rows(X& x, float* dst, int stride, const void* base, int64_t b, int64_t S,
                          int64_t first, int count, int64_t heads, int64_t head, int64_t hd) {
  for (int64_t e = x.tid(); e < count * hd; e += x.nthreads()) {
    const int64_t r = e / hd, c = e % hd, i = first + r;
    dst[r * stride + c] = i < S ? to_acc(row_of<E>(base, b * S + i, heads, head, hd)[c]) : 0.0f;
  }
}

struct AttentionForwardSimpleKernel {
  static constexpr int kMaxThreads = 128, kRows = 16, kKeys = 32;
  static constexpr size_t smem_bytes(int64_t hd) {
    return size_t(kRows * hd + kKeys * (hd + 1) + kKeys * hd + kKeys) * 4;
  }
  // Grid (query tiles, H, B).
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* o, float* lse, AttnPtrs in, AttnDims d) const {
    const int64_t b = x.bz(), h = x.by(), q0 = int64_t(x.bx()) * kRows, kvh = h / d.group();
    const int hd = int(d.hd), ncols = (hd + 31) / 32, warp = x.tid() / kWarp, lane = x.lane();
    float* Qs = x.template smem<float>();
    float* Ks = Qs + kRows * hd;  // row stride hd + 1: lanes read different rows
    float* Vs = Ks + kKeys * (hd + 1);
    int32_t* segk = reinterpret_cast<int32_t*>(Vs + kKeys * hd);
    load_rows<X, E>(x, Qs, hd, in.q, b, d.S, q0, kRows, d.H, h, hd);

    OnlineSoftmax st[4];
    float acc[4][kAttnMaxCols] = {};
    const TileRange tiles = key_tiles(q0, kmin(q0 + kRows, d.S), d.window, kKeys);
    for (int64_t kt = tiles.begin; kt < tiles.end; ++kt) {
      const int64_t k0 = kt * kKeys;
      x.sync();
      load_rows<X, E>(x, Ks, hd + 1, in.k, b, d.S, k0, kKeys, d.KV, kvh, hd);
      load_rows<X, E>(x, Vs, hd, in.v, b, d.S, k0, kKeys, d.KV, kvh, hd);
      if (x.tid() < kKeys) segk[x.tid()] = k0 + x.tid() < d.S ? in.seg[b * d.S + k0 + x.tid()] : 0;
      x.sync();
      GEMMAX_UNROLL
      for (int rr = 0; rr < 4; ++rr) {
        const int row = warp * 4 + rr;
        const int64_t i = q0 + row, j = k0 + lane;
        if (i >= d.S) continue;  // uniform over the warp
        const bool vis =
            j < d.S && causal_visible(i, j, d.window) && segk[lane] == in.seg[b * d.S + i];
        float s = kNegInf;
        if (vis) {
          s = 0;
          for (int c = 0; c < hd; ++c) s += Qs[row * hd + c] * Ks[lane * (hd + 1) + c];
          if (d.round_scores) s = to_acc(from_acc<E>(s));
        }
        const float f = st[rr].add_tile(warp_max(x, s));
        const float p = st[rr].p(s);
        st[rr].sum += warp_sum(x, p);
        GEMMAX_UNROLL
        for (int u = 0; u < kAttnMaxCols; ++u) acc[rr][u] *= f;
        GEMMAX_UNROLL
        for (int jj = 0; jj < kKeys; ++jj) {
          const float pj = x.shfl(p, jj);
          if (pj == 0.0f) continue;
          GEMMAX_UNROLL
          for (int u = 0; u < kAttnMaxCols; ++u) {
            const int c = lane + 32 * u;
            if (u < ncols && c < hd) acc[rr][u] += pj * Vs[jj * hd + c];
          }
        }
      }
    }
    GEMMAX_UNROLL
    for (int rr = 0; rr < 4; ++rr) {
      const int64_t i = q0 + warp * 4 + rr;
      if (i >= d.S) continue;
      E* orow = o + ((b * d.S + i) * d.H + h) * hd;
      for (int u = 0; u < ncols; ++u) {
        const int c = lane + 32 * u;
        if (c < hd) orow[c] = from_acc<E>(acc[rr][u] / st[rr].sum);
      }
      if (lane == 0) lse[(b * d.H + h) * d.S + i] = st[rr].lse();
    }
  }
};

// dq_i = sum_j p_ij (dp_ij - delta_i) k_j with dp_ij = do_i . v_j, delta_i = do_i . o_i.
struct AttentionDqSimpleKernel {
  static constexpr int kMaxThreads = 128, kRows = 16, kKeys = 32;
  static constexpr size_t smem_bytes(int64_t hd) {
    return size_t(2 * kRows * hd + 2 * kKeys * (hd + 1) + kKeys) * 4;
  }
  // Grid (query tiles, H, B).
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* dq, AttnPtrs in, AttnDims d) const {
    const int64_t b = x.bz(), h = x.by(), q0 = int64_t(x.bx()) * kRows, kvh = h / d.group();
    const int hd = int(d.hd), ncols = (hd + 31) / 32, warp = x.tid() / kWarp, lane = x.lane();
    float* Qs = x.template smem<float>();
    float* Ds = Qs + kRows * hd;
    float* Ks = Ds + kRows * hd;
    float* Vs = Ks + kKeys * (hd + 1);
    int32_t* segk = reinterpret_cast<int32_t*>(Vs + kKeys * (hd + 1));
    load_rows<X, E>(x, Qs, hd, in.q, b, d.S, q0, kRows, d.H, h, hd);
    load_rows<X, E>(x, Ds, hd, in.dout, b, d.S, q0, kRows, d.H, h, hd);
    x.sync();
    float delta[4], lse_i[4];
    GEMMAX_UNROLL
    for (int rr = 0; rr < 4; ++rr) {
      const int row = warp * 4 + rr;
      const int64_t i = q0 + row;
      float s = 0;
      if (i < d.S) {
        const E* orow = row_of<E>(in.o, b * d.S + i, d.H, h, hd);
        for (int c = lane; c < hd; c += 32) s += Ds[row * hd + c] * to_acc(orow[c]);
      }
      delta[rr] = warp_sum(x, s);
      lse_i[rr] = i < d.S ? in.lse[(b * d.H + h) * d.S + i] : 0.0f;
    }
    float acc[4][kAttnMaxCols] = {};
    const TileRange tiles = key_tiles(q0, kmin(q0 + kRows, d.S), d.window, kKeys);
    for (int64_t kt = tiles.begin; kt < tiles.end; ++kt) {
      const int64_t k0 = kt * kKeys;
      x.sync();
      load_rows<X, E>(x, Ks, hd + 1, in.k, b, d.S, k0, kKeys, d.KV, kvh, hd);
      load_rows<X, E>(x, Vs, hd + 1, in.v, b, d.S, k0, kKeys, d.KV, kvh, hd);
      if (x.tid() < kKeys) segk[x.tid()] = k0 + x.tid() < d.S ? in.seg[b * d.S + k0 + x.tid()] : 0;
      x.sync();
      GEMMAX_UNROLL
      for (int rr = 0; rr < 4; ++rr) {
        const int row = warp * 4 + rr;
        const int64_t i = q0 + row, j = k0 + lane;
        if (i >= d.S) continue;
        const bool vis =
            j < d.S && causal_visible(i, j, d.window) && segk[lane] == in.seg[b * d.S + i];
        float ds = 0;
        if (vis) {
          float s = 0, dp = 0;
          for (int c = 0; c < hd; ++c) {
            s += Qs[row * hd + c] * Ks[lane * (hd + 1) + c];
            dp += Ds[row * hd + c] * Vs[lane * (hd + 1) + c];
          }
          if (d.round_scores) s = to_acc(from_acc<E>(s));
          ds = kexp(s - lse_i[rr]) * (dp - delta[rr]);
          if (d.round_scores) ds = to_acc(from_acc<E>(ds));
        }
        GEMMAX_UNROLL
        for (int jj = 0; jj < kKeys; ++jj) {
          const float dsj = x.shfl(ds, jj);
          if (dsj == 0.0f) continue;
          GEMMAX_UNROLL
          for (int u = 0; u < kAttnMaxCols; ++u) {
            const int c = lane + 32 * u;
            if (u < ncols && c < hd) acc[rr][u] += dsj * Ks[jj * (hd + 1) + c];
          }
        }
      }
    }
    GEMMAX_UNROLL
    for (int rr = 0; rr < 4; ++rr) {
      const int64_t i = q0 + warp * 4 + rr;
      if (i >= d.S) continue;
      E* row = dq + ((b * d.S + i) * d.H + h) * hd;
      for (int u = 0; u < ncols; ++u)
        if (lane + 32 * u < hd) row[lane + 32 * u] = from_acc<E>(acc[rr][u]);
    }
  }
};

// dv_j = sum_i p_ij do_i, dk_j = sum_i p_ij (dp_ij - delta_i) q_i over the query rows of every
// head of the kv head's group, in (head, row) order.
struct AttentionDkvSimpleKernel {
  static constexpr int kMaxThreads = 128, kKeys = 16;
  static constexpr size_t smem_bytes(int64_t hd) {
    return size_t(4 * kKeys * hd + 2 * hd + 2 * kKeys + kKeys + 8) * 4;
  }
  // Grid (key tiles, KV, B).
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* dk, E* dv, AttnPtrs in, AttnDims d) const {
    const int64_t b = x.bz(), kvh = x.by(), k0 = int64_t(x.bx()) * kKeys;
    const int hd = int(d.hd), warp = x.tid() / kWarp, lane = x.lane(), warps = x.nthreads() / kWarp;
    float* Ks = x.template smem<float>();
    float* Vs = Ks + kKeys * hd;
    float* dKs = Vs + kKeys * hd;
    float* dVs = dKs + kKeys * hd;
    float* qrow = dVs + kKeys * hd;
    float* drow = qrow + hd;
    float* P = drow + hd;
    float* DS = P + kKeys;
    int32_t* segk = reinterpret_cast<int32_t*>(DS + kKeys);
    float* red = reinterpret_cast<float*>(segk + kKeys);
    load_rows<X, E>(x, Ks, hd, in.k, b, d.S, k0, kKeys, d.KV, kvh, hd);
    load_rows<X, E>(x, Vs, hd, in.v, b, d.S, k0, kKeys, d.KV, kvh, hd);
    for (int e = x.tid(); e < kKeys * hd; e += x.nthreads()) dKs[e] = dVs[e] = 0.0f;
    if (x.tid() < kKeys) segk[x.tid()] = k0 + x.tid() < d.S ? in.seg[b * d.S + k0 + x.tid()] : 0;
    const int64_t k1 = kmin(k0 + kKeys, d.S);
    const int64_t last = last_visible_query(k1 - 1, d.S, d.window);
    for (int64_t h = kvh * d.group(); h < (kvh + 1) * d.group(); ++h)
      for (int64_t i = k0; i <= last; ++i) {
        const int64_t ti = b * d.S + i;
        const E* q = row_of<E>(in.q, ti, d.H, h, hd);
        const E* dout = row_of<E>(in.dout, ti, d.H, h, hd);
        const E* o = row_of<E>(in.o, ti, d.H, h, hd);
        float part = 0;
        for (int c = x.tid(); c < hd; c += x.nthreads()) {
          qrow[c] = to_acc(q[c]);
          drow[c] = to_acc(dout[c]);
          part += drow[c] * to_acc(o[c]);
        }
        const float delta = group_sum(x, part, x.nthreads(), red);  // its barriers publish the rows
        const float l = in.lse[(b * d.H + h) * d.S + i];
        const int32_t seg_i = in.seg[ti];
        for (int jj = warp; jj < kKeys; jj += warps) {
          const int64_t j = k0 + jj;
          float s = 0, dp = 0;
          for (int c = lane; c < hd; c += 32) {
            s += qrow[c] * Ks[jj * hd + c];
            dp += drow[c] * Vs[jj * hd + c];
          }
          s = warp_sum(x, s);
          dp = warp_sum(x, dp);
          if (d.round_scores) s = to_acc(from_acc<E>(s));
          const bool vis = j < d.S && causal_visible(i, j, d.window) && segk[jj] == seg_i;
          const float p = vis ? kexp(s - l) : 0.0f;
          if (lane == 0) {
            P[jj] = p;
            const float ds = p * (dp - delta);
            DS[jj] = d.round_scores ? to_acc(from_acc<E>(ds)) : ds;
          }
        }
        x.sync();
        for (int e = x.tid(); e < kKeys * hd; e += x.nthreads()) {
          const int jj = e / hd, c = e % hd;
          dVs[e] += P[jj] * drow[c];
          dKs[e] += DS[jj] * qrow[c];
        }
        x.sync();
      }
    for (int e = x.tid(); e < kKeys * hd; e += x.nthreads()) {
      const int64_t j = k0 + e / hd, c = e % hd;
      if (j >= d.S) continue;
      const int64_t at = ((b * d.S + j) * d.KV + kvh) * hd + c;
      dk[at] = from_acc<E>(dKs[e]);
      dv[at] = from_acc<E>(dVs[e]);
    }
  }
};

struct DecodeDims {
  int64_t n, H, KV, hd, C, window;
};

// Attention of n new queries over a cache of C slots (Backend::attention_decode). Grid (n, H),
// four warps: warp w takes slots w, w + 4, ... with its own online softmax; the four partial
// states merge in warp order at the end.
struct AttentionDecodeKernel {
  static constexpr int kMaxThreads = 128;
  static constexpr size_t smem_bytes(int64_t hd) { return size_t(hd + 4 * (hd + 2)) * 4; }
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* o, const E* q, const int32_t* q_pos, const E* k, const E* v,
                             const int32_t* kv_pos, DecodeDims d, DeviceError* err) const {
    const int64_t i = x.bx(), h = x.by(), kvh = h / (d.H / d.KV);
    const int hd = int(d.hd), ncols = (hd + 31) / 32, warp = x.tid() / kWarp, lane = x.lane();
    float* qs = x.template smem<float>();
    float* part = qs + hd;  // per warp: max, sum, acc[hd]
    for (int c = x.tid(); c < hd; c += x.nthreads()) qs[c] = to_acc(q[(i * d.H + h) * hd + c]);
    x.sync();
    const int32_t qp = q_pos[i];
    OnlineSoftmax st;
    float acc[kAttnMaxCols] = {};
    for (int64_t c = warp; c < d.C; c += 4) {
      const int32_t kp = kv_pos[c];
      if (!(kp >= 0 && kp <= qp && (d.window == 0 || int64_t(kp) > int64_t(qp) - d.window)))
        continue;
      const E* kc = k + (c * d.KV + kvh) * hd;
      float s = 0;
      for (int e = lane; e < hd; e += 32) s += qs[e] * to_acc(kc[e]);
      s = warp_sum(x, s);
      const float f = st.add_tile(s);
      const float p = st.p(s);
      st.sum += p;
      const E* vc = v + (c * d.KV + kvh) * hd;
      GEMMAX_UNROLL
      for (int u = 0; u < kAttnMaxCols; ++u)
        if (u < ncols && lane + 32 * u < hd) acc[u] = acc[u] * f + p * to_acc(vc[lane + 32 * u]);
    }
    float* mine = part + warp * (hd + 2);
    if (lane == 0) {
      mine[0] = st.max;
      mine[1] = st.sum;
    }
    for (int u = 0; u < ncols; ++u)
      if (lane + 32 * u < hd) mine[2 + lane + 32 * u] = acc[u];
    x.sync();
    if (warp != 0) return;
    OnlineSoftmax all;
    GEMMAX_UNROLL
    for (int u = 0; u < kAttnMaxCols; ++u) acc[u] = 0;
    for (int w = 0; w < 4; ++w) {
      const float* pw = part + w * (hd + 2);
      OnlineSoftmax other;
      other.max = pw[0];
      other.sum = pw[1];
      float fa, fb;
      all.merge(other, &fa, &fb);
      for (int u = 0; u < ncols; ++u)
        if (lane + 32 * u < hd) acc[u] = acc[u] * fa + pw[2 + lane + 32 * u] * fb;
    }
    if (all.sum == 0.0f) {
      if (lane == 0) record_error(x, err, DeviceError::kNoVisibleSlot, kOpDecode, qp, i, 0);
      return;
    }
    for (int u = 0; u < ncols; ++u)
      if (lane + 32 * u < hd) o[(i * d.H + h) * hd + lane + 32 * u] = from_acc<E>(acc[u] / all.sum);
  }
};

}  // namespace gemmax::kern

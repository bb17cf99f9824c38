// Flash attention on tensor cores (bfloat16 in, fp32 softmax statistics and accumulators) for
// head_dim a multiple of 128 (the model's 256 and 512).
//
// A block takes R rows: hb heads of one kv group times R / hb query positions (heads share the
// block's key and value tiles: GQA reads each tile once for all of them). Sixteen warps split
// the rows into 16-row slices and the head_dim into P = head_dim / 128 parts: warp (slice, part)
// holds the output columns of its part, so a 512-wide row fits in registers. Scores need the
// whole head_dim: each warp computes its part's partial products and the P partials of a slice
// are summed, in part order, through shared memory. Key tiles wholly outside the causal window
// of the block are never visited; the rest are masked per element (causal, window, segments).
#pragma once

#include "gemmax/backend/cuda/kernels/attention_tiles.h"
#include "gemmax/backend/cuda/kernels/elementwise.h"
#include "gemmax/backend/cuda/kernels/mma_tile.h"

namespace gemmax::kern {

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// The largest number of heads of a group (a divisor of it) whose rows split evenly into the
// block's 16-row slices: slices % heads == 0.
GEMMAX_HD int heads_per_block(int64_t group, int slices) {
  int hb = 1;
  for (int h = 1; h <= slices && h <= group; ++h)
    if (group % h == 0 && slices % h == 0) hb = h;
  return hb;
}

// A block's rows: row r is head h0 + r / rq at position q0 + r % rq of sequence b.
struct FlashRows {
  int64_t b, kvh, h0, q0;
  int rq;
  GEMMAX_HD int64_t head(int r) const { return h0 + r / rq; }
  GEMMAX_HD int64_t pos(int r) const { return q0 + r % rq; }
  // Grid (position tiles, kv heads x head blocks, B).
  template <class X>
  GEMMAX_HD static FlashRows of(X& x, const AttnDims& d, int rows, int hb) {
    const int64_t blocks_per_kv = d.group() / hb;
    const int64_t kvh = x.by() / blocks_per_kv, hblock = x.by() % blocks_per_kv;
    const int rq = rows / hb;
    return {int64_t(x.bz()), kvh, kvh * d.group() + hblock * hb, int64_t(x.bx()) * rq, rq};
  }
};

template <int HD>
struct FlashForward {
  static constexpr int kParts = HD / 128, kWarps = 16, kThreads = 32 * kWarps;
  static constexpr int kSlices = kWarps / kParts, R = 16 * kSlices, Bc = 32, kXs = Bc + 4;
  static constexpr size_t smem_bytes() {
    return size_t(R + 2 * Bc) * HD * 2 + (kParts > 1 ? size_t(kWarps) * 16 * kXs * 4 : 0) + Bc * 4;
  }
};

// Sums the kParts partial 16 x Bc score tiles of this warp's slice through shared memory `xs`
// (one [16][stride] tile per warp). Starts and ends with the caller's barriers in place: the
// caller syncs before anyone reads and before the next write.
template <int kNt, class X>
GEMMAX_KFN void write_partial(X& x, float* xs, int warp, int stride, const float (&s)[kNt][4]) {
  float* mine = xs + warp * 16 * stride;
  const int l = x.lane();
  for (int nt = 0; nt < kNt; ++nt)
    for (int i = 0; i < 4; ++i) mine[acc_row(l, i) * stride + nt * 8 + acc_col(l, i)] = s[nt][i];
}
template <int kNt, class X>
GEMMAX_KFN void sum_partials(X& x, const float* xs, int first_warp, int parts, int stride,
                             float (&s)[kNt][4]) {
  const int l = x.lane();
  for (int nt = 0; nt < kNt; ++nt)
    for (int i = 0; i < 4; ++i) {
      float v = 0;
      for (int p = 0; p < parts; ++p)
        v += xs[(first_warp + p) * 16 * stride + acc_row(l, i) * stride + nt * 8 + acc_col(l, i)];
      s[nt][i] = v;
    }
}

// Max and sum over the four lanes (t = 0..3) that hold one accumulator row.
template <class X>
GEMMAX_KFN float quad_max(X& x, float v) {
  v = kmax(v, x.shfl_xor(v, 1));
  return kmax(v, x.shfl_xor(v, 2));
}
template <class X>
GEMMAX_KFN float quad_sum(X& x, float v) {
  v += x.shfl_xor(v, 1);
  return v + x.shfl_xor(v, 2);
}

// Two accumulator tiles (16 x 8 each, 16 consecutive columns) as one A fragment (16 x 16) in bf16.
GEMMAX_HD void acc_to_a(const float (&c0)[4], const float (&c1)[4], uint32_t (&a)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

template <int HD>
struct AttentionForwardMmaKernel {
  using F = FlashForward<HD>;
  static constexpr int kMaxThreads = F::kThreads;
  template <class X>
  GEMMAX_KFN void operator()(X& x, bf16s* o, float* lse, const bf16s* q, const bf16s* k,
                             const bf16s* v, const int32_t* seg, AttnDims d, int hb) const {
    constexpr int P = F::kParts, Bc = F::Bc, kNt = Bc / 8, kOt = 128 / 8;
    const FlashRows rows = FlashRows::of(x, d, F::R, hb);
    const int warp = x.tid() / kWarp, slice = warp / P, part = warp % P, l = x.lane();
    bf16s* Qs = x.template smem<bf16s>();
    bf16s* Ks = Qs + F::R * HD;
    bf16s* Vs = Ks + Bc * HD;
    float* xs = reinterpret_cast<float*>(Vs + Bc * HD);
    int32_t* segk = reinterpret_cast<int32_t*>(xs + (P > 1 ? F::kWarps * 16 * F::kXs : 0));
    const int64_t b = rows.b, S = d.S;
    auto q_row = [&](int r) -> const bf16s* {
      const int64_t i = rows.pos(r);
      return i < S ? q + ((b * S + i) * d.H + rows.head(r)) * HD : nullptr;
    };
    load_tile_async(x, Qs, F::R, HD, q_row, 0, HD, q);
    x.cp_async_commit();
    auto kv_row = [&](const bf16s* base, int64_t k0) {
      return [=](int r) -> const bf16s* {
        return k0 + r < S ? base + ((b * S + k0 + r) * d.KV + rows.kvh) * HD : nullptr;
      };
    };
    const int64_t q_hi = kmin(S, rows.q0 + rows.rq);
    const TileRange tiles = key_tiles(rows.q0, q_hi, d.window, Bc);
    load_tile_async(x, Ks, Bc, HD, kv_row(k, tiles.begin * Bc), 0, HD, k);
    x.cp_async_commit();
    load_tile_async(x, Vs, Bc, HD, kv_row(v, tiles.begin * Bc), 0, HD, v);
    x.cp_async_commit();

    // This lane's two rows: slice rows g and g + 8.
    const int r_lo = slice * 16 + (l >> 2);
    const int64_t pos[2] = {rows.pos(r_lo), rows.pos(r_lo + 8)};
    int32_t seg_q[2];
    for (int e = 0; e < 2; ++e) seg_q[e] = pos[e] < S ? seg[b * S + pos[e]] : 0;
    float m[2] = {kNegInf, kNegInf}, lsum[2] = {0, 0};
    float acc[kOt][4] = {};
    for (int64_t kt = tiles.begin; kt < tiles.end; ++kt) {
      const int64_t k0 = kt * Bc;
      if (x.tid() < Bc) segk[x.tid()] = k0 + x.tid() < S ? seg[b * S + k0 + x.tid()] : 0;
      x.template cp_async_wait<1>();  // the key tile (the value tile may still be in flight)
      x.sync();
      float s[kNt][4] = {};
      for (int kk = 0; kk < 128; kk += 16) {
        uint32_t a[4];
        load_a_frag(x, Qs, HD, false, slice * 16, part * 128 + kk, a);
        for (int nt = 0; nt < kNt; nt += 2) {
          uint32_t b0[2], b1[2];
          load_b_frags(x, Ks, HD, false, nt * 8, part * 128 + kk, b0, b1);
          x.mma_bf16(s[nt], a, b0);
          x.mma_bf16(s[nt + 1], a, b1);
        }
      }
      if constexpr (P > 1) write_partial(x, xs, warp, F::kXs, s);
      x.sync();  // partials written; every warp is done with the key tile
      if (kt + 1 < tiles.end) load_tile_async(x, Ks, Bc, HD, kv_row(k, k0 + Bc), 0, HD, k);
      x.cp_async_commit();
      if constexpr (P > 1) sum_partials(x, xs, slice * P, P, F::kXs, s);
      // Mask, then the online softmax in base 2.
      float tmax[2] = {kNegInf, kNegInf};
      for (int nt = 0; nt < kNt; ++nt)
        for (int i = 0; i < 4; ++i) {
          const int e = i >> 1, col = nt * 8 + acc_col(l, i);
          const int64_t j = k0 + col;
          const bool vis =
              pos[e] < S && j < S && causal_visible(pos[e], j, d.window) && segk[col] == seg_q[e];
          s[nt][i] = vis ? s[nt][i] * kLog2e : kNegInf;
          tmax[e] = kmax(tmax[e], s[nt][i]);
        }
      float scale[2], rsum[2] = {0, 0};
      for (int e = 0; e < 2; ++e) {
        const float mn = kmax(m[e], quad_max(x, tmax[e]));
        scale[e] = m[e] == kNegInf ? 0.0f : kexp2(m[e] - mn);
        m[e] = mn;
      }
      for (int nt = 0; nt < kNt; ++nt)
        for (int i = 0; i < 4; ++i) {
          const int e = i >> 1;
          s[nt][i] = s[nt][i] == kNegInf ? 0.0f : kexp2(s[nt][i] - m[e]);
          rsum[e] += s[nt][i];
        }
      for (int e = 0; e < 2; ++e) lsum[e] = lsum[e] * scale[e] + quad_sum(x, rsum[e]);
      for (int nt = 0; nt < kOt; ++nt)
        for (int i = 0; i < 4; ++i) acc[nt][i] *= scale[i >> 1];
      x.template cp_async_wait<1>();  // the value tile
      x.sync();
      for (int kk = 0; kk < Bc / 16; ++kk) {
        uint32_t a[4];
        acc_to_a(s[2 * kk], s[2 * kk + 1], a);
        for (int nt = 0; nt < kOt; nt += 2) {
          uint32_t b0[2], b1[2];
          load_b_frags(x, Vs, HD, true, part * 128 + nt * 8, kk * 16, b0, b1);
          x.mma_bf16(acc[nt], a, b0);
          x.mma_bf16(acc[nt + 1], a, b1);
        }
      }
      x.sync();  // every warp is done with the value tile
      if (kt + 1 < tiles.end) load_tile_async(x, Vs, Bc, HD, kv_row(v, k0 + Bc), 0, HD, v);
      x.cp_async_commit();
    }
    x.template cp_async_wait<0>();
    for (int e = 0; e < 2; ++e) {
      if (pos[e] >= S) continue;
      const int64_t h = rows.head(r_lo + 8 * e);
      bf16s* orow = o + ((b * S + pos[e]) * d.H + h) * HD + part * 128;
      const float inv = lsum[e] > 0 ? 1.0f / lsum[e] : 0.0f;
      for (int nt = 0; nt < kOt; ++nt) {
        const int col = nt * 8 + 2 * (l & 3);
        orow[col] = from_acc<bf16s>(acc[nt][2 * e] * inv);
        orow[col + 1] = from_acc<bf16s>(acc[nt][2 * e + 1] * inv);
      }
      if (part == 0 && (l & 3) == 0)
        lse[(b * d.H + h) * S + pos[e]] = (m[e] + klog2(lsum[e])) * kLn2;
    }
  }
};

}  // namespace gemmax::kern

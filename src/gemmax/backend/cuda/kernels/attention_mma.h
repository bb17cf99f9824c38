// Flash attention on tensor cores (bfloat16 in, fp32 softmax statistics and accumulators) for
// head_dim a multiple of 128 (the model's 256 and 512).
//
// A block takes R rows: hb heads of one kv group times R / hb query positions (heads share the
// block's key and value tiles: GQA reads each tile once for all of them). Sixteen warps split
// the rows into 16-row slices and the head_dim into P = head_dim / 128 parts: warp (slice, part)
// holds the output columns of its part, so a 512-wide row fits in registers. Scores need the
// whole head_dim: each warp computes its part's partial products and the P partials of a slice
// are summed, in part order, through shared memory. Key tiles wholly outside the causal window
// of the block are never visited; tiles on a boundary (the diagonal, the window's edge, a
// segment's edge, the sequence's end) are masked per element; the rest, most of a long
// sequence, skip the mask (attention_tiles.h, interior tiles).
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

// AttnDims::round_scores: a warp's score accumulators rounded to bf16.
template <int N>
GEMMAX_HD void round_acc(float (&s)[N][4]) {
  GEMMAX_UNROLL
  for (int nt = 0; nt < N; ++nt) {
    GEMMAX_UNROLL
    for (int i = 0; i < 4; ++i) s[nt][i] = to_acc(from_acc<bf16>(s[nt][i]));
  }
}

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
  GEMMAX_UNROLL
  for (int nt = 0; nt < kNt; ++nt) {
    GEMMAX_UNROLL
    for (int i = 0; i < 4; ++i) mine[acc_row(l, i) * stride + nt * 8 + acc_col(l, i)] = s[nt][i];
  }
}
template <int kNt, class X>
GEMMAX_KFN void sum_partials(X& x, const float* xs, int first_warp, int parts, int stride,
                             float (&s)[kNt][4]) {
  const int l = x.lane();
  GEMMAX_UNROLL
  for (int nt = 0; nt < kNt; ++nt) {
    GEMMAX_UNROLL
    for (int i = 0; i < 4; ++i) {
      float v = 0;
      for (int p = 0; p < parts; ++p)
        v += xs[(first_warp + p) * 16 * stride + acc_row(l, i) * stride + nt * 8 + acc_col(l, i)];
      s[nt][i] = v;
    }
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
  GEMMAX_KFN void operator()(X& x, bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v,
                             const int32_t* seg, AttnDims d, int hb) const {
    constexpr int P = F::kParts, Bc = F::Bc, kNt = Bc / 8, kOt = 128 / 8;
    const FlashRows rows = FlashRows::of(x, d, F::R, hb);
    const int warp = x.tid() / kWarp, slice = warp / P, part = warp % P, l = x.lane();
    bf16* Qs = x.template smem<bf16>();
    bf16* Ks = Qs + F::R * HD;
    bf16* Vs = Ks + Bc * HD;
    float* xs = reinterpret_cast<float*>(Vs + Bc * HD);
    int32_t* segk = reinterpret_cast<int32_t*>(xs + (P > 1 ? F::kWarps * 16 * F::kXs : 0));
    const int64_t b = rows.b, S = d.S;
    auto q_row = [&](int r) -> const bf16* {
      const int64_t i = rows.pos(r);
      return i < S ? q + ((b * S + i) * d.H + rows.head(r)) * HD : nullptr;
    };
    load_tile_async(x, Qs, F::R, HD, q_row, 0, HD, q);
    x.cp_async_commit();
    auto kv_row = [&](const bf16* base, int64_t k0) {
      return [=](int r) -> const bf16* {
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
    GEMMAX_UNROLL
    for (int e = 0; e < 2; ++e) seg_q[e] = pos[e] < S ? seg[b * S + pos[e]] : 0;
    const WarpSpan span = warp_span(x, pos, seg_q, S);
    float m[2] = {kNegInf, kNegInf}, lsum[2] = {0, 0};
    float acc[kOt][4] = {};
    for (int64_t kt = tiles.begin; kt < tiles.end; ++kt) {
      const int64_t k0 = kt * Bc;
      if (x.tid() < Bc) segk[x.tid()] = k0 + x.tid() < S ? seg[b * S + k0 + x.tid()] : 0;
      x.template cp_async_wait<1>();  // the key tile (the value tile may still be in flight)
      x.sync();
      float s[kNt][4] = {};
      GEMMAX_UNROLL
      for (int kk = 0; kk < 128; kk += 16) {
        uint32_t a[4];
        load_a_frag(x, Qs, HD, false, slice * 16, part * 128 + kk, a);
        GEMMAX_UNROLL
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
      if (d.round_scores) round_acc(s);
      // Mask (boundary tiles only), then the online softmax in base 2.
      float tmax[2] = {kNegInf, kNegInf};
      if (interior_keys(x, span, k0, Bc, segk, S, d.window)) {
        GEMMAX_UNROLL
        for (int nt = 0; nt < kNt; ++nt) {
          GEMMAX_UNROLL
          for (int i = 0; i < 4; ++i) {
            s[nt][i] *= kLog2e;
            tmax[i >> 1] = kmax(tmax[i >> 1], s[nt][i]);
          }
        }
      } else {
        GEMMAX_UNROLL
        for (int nt = 0; nt < kNt; ++nt) {
          GEMMAX_UNROLL
          for (int i = 0; i < 4; ++i) {
            const int e = i >> 1, col = nt * 8 + acc_col(l, i);
            const int64_t j = k0 + col;
            const bool vis = pos[e] < S && j < S && causal_visible(pos[e], j, d.window) &&
                             segk[col] == seg_q[e];
            s[nt][i] = vis ? s[nt][i] * kLog2e : kNegInf;
            tmax[e] = kmax(tmax[e], s[nt][i]);
          }
        }
      }
      float scale[2], rsum[2] = {0, 0};
      GEMMAX_UNROLL
      for (int e = 0; e < 2; ++e) {
        const float mn = kmax(m[e], quad_max(x, tmax[e]));
        scale[e] = m[e] == kNegInf ? 0.0f : kexp2(m[e] - mn);
        m[e] = mn;
      }
      GEMMAX_UNROLL
      for (int nt = 0; nt < kNt; ++nt) {
        GEMMAX_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int e = i >> 1;
          s[nt][i] = s[nt][i] == kNegInf ? 0.0f : kexp2(s[nt][i] - m[e]);
          rsum[e] += s[nt][i];
        }
      }
      GEMMAX_UNROLL
      for (int e = 0; e < 2; ++e) lsum[e] = lsum[e] * scale[e] + quad_sum(x, rsum[e]);
      GEMMAX_UNROLL
      for (int nt = 0; nt < kOt; ++nt) {
        GEMMAX_UNROLL
        for (int i = 0; i < 4; ++i) acc[nt][i] *= scale[i >> 1];
      }
      x.template cp_async_wait<1>();  // the value tile
      x.sync();
      GEMMAX_UNROLL
      for (int kk = 0; kk < Bc / 16; ++kk) {
        uint32_t a[4];
        acc_to_a(s[2 * kk], s[2 * kk + 1], a);
        GEMMAX_UNROLL
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
    GEMMAX_UNROLL
    for (int e = 0; e < 2; ++e) {
      if (pos[e] >= S) continue;
      const int64_t h = rows.head(r_lo + 8 * e);
      bf16* orow = o + ((b * S + pos[e]) * d.H + h) * HD + part * 128;
      const float inv = lsum[e] > 0 ? 1.0f / lsum[e] : 0.0f;
      GEMMAX_UNROLL
      for (int nt = 0; nt < kOt; ++nt) {
        const int col = nt * 8 + 2 * (l & 3);
        orow[col] = from_acc<bf16>(acc[nt][2 * e] * inv);
        orow[col + 1] = from_acc<bf16>(acc[nt][2 * e + 1] * inv);
      }
      if (part == 0 && (l & 3) == 0)
        lse[(b * d.H + h) * S + pos[e]] = (m[e] + klog2(lsum[e])) * kLn2;
    }
  }
};

}  // namespace gemmax::kern

namespace gemmax::kern {

// ---- backward ------------------------------------------------------------------------------
// delta_i = do_i . o_i first (one warp per row, into [B, H, S] like the log-sum-exp); then dq
// by query blocks (as the forward: scores and dp = do . v^T summed over head_dim parts, dq += ds
// k) and dk, dv by key blocks (s^T = k q^T and dp^T = v do^T summed over parts, dv += p^T do,
// dk += ds^T q over every query row and head of the group that sees the keys). Each output is
// owned by one block: no atomics, the same bits every run.

struct AttentionDeltaKernel {
  static constexpr int kMaxThreads = 256;
  template <class X>
  GEMMAX_KFN void operator()(X& x, float* delta, const bf16* o, const bf16* dout,
                             AttnDims d) const {
    const int warps = x.nthreads() / kWarp;
    const int64_t rows = d.B * d.H * d.S;
    for (int64_t r = int64_t(x.bx()) * warps + x.tid() / kWarp; r < rows;
         r += int64_t(x.gx()) * warps) {
      const int64_t i = r % d.S, h = (r / d.S) % d.H, b = r / (d.S * d.H);
      const int64_t at = ((b * d.S + i) * d.H + h) * d.hd;
      float s = 0;
      for (int64_t c = x.lane(); c < d.hd; c += kWarp)
        s += to_acc(o[at + c]) * to_acc(dout[at + c]);
      s = warp_sum(x, s);
      if (x.lane() == 0) delta[r] = s;
    }
  }
};

// Key tiles of 64 where shared memory allows (head_dim 128 and 256; 512 would need 260 KiB), so
// that each barrier and partial-sum round covers twice the products.
template <int HD>
struct FlashDq {
  static constexpr int kParts = HD / 128, kWarps = 8, kThreads = 32 * kWarps;
  static constexpr int kSlices = kWarps / kParts, R = 16 * kSlices, Bc = HD <= 256 ? 64 : 32,
                       kXs = Bc + 4;
  static constexpr size_t smem_bytes() {
    return size_t(2 * R + 2 * Bc) * HD * 2 + size_t(2 * kWarps) * 16 * kXs * 4 + Bc * 4;
  }
  static_assert(smem_bytes() <= 227 * 1024, "over Hopper's shared memory per block");
};

template <int HD>
struct AttentionDqMmaKernel {
  using F = FlashDq<HD>;
  static constexpr int kMaxThreads = F::kThreads;
  template <class X>
  GEMMAX_KFN void operator()(X& x, bf16* dq, const bf16* q, const bf16* k, const bf16* v,
                             const bf16* dout, const float* lse, const float* delta,
                             const int32_t* seg, AttnDims d, int hb) const {
    constexpr int P = F::kParts, Bc = F::Bc, kNt = Bc / 8, kOt = 128 / 8;
    const FlashRows rows = FlashRows::of(x, d, F::R, hb);
    const int warp = x.tid() / kWarp, slice = warp / P, part = warp % P, l = x.lane();
    bf16* Qs = x.template smem<bf16>();
    bf16* Ds = Qs + F::R * HD;
    bf16* Ks = Ds + F::R * HD;
    bf16* Vs = Ks + Bc * HD;
    float* xs = reinterpret_cast<float*>(Vs + Bc * HD);  // [2][warps][16][kXs]: s, dp
    float* xp = xs + F::kWarps * 16 * F::kXs;
    int32_t* segk = reinterpret_cast<int32_t*>(xp + F::kWarps * 16 * F::kXs);
    const int64_t b = rows.b, S = d.S;
    auto q_rows = [&](const bf16* base) {
      return [=](int r) -> const bf16* {
        const int64_t i = rows.pos(r);
        return i < S ? base + ((b * S + i) * d.H + rows.head(r)) * HD : nullptr;
      };
    };
    auto kv_rows = [&](const bf16* base, int64_t k0) {
      return [=](int r) -> const bf16* {
        return k0 + r < S ? base + ((b * S + k0 + r) * d.KV + rows.kvh) * HD : nullptr;
      };
    };
    load_tile_async(x, Qs, F::R, HD, q_rows(q), 0, HD, q);
    load_tile_async(x, Ds, F::R, HD, q_rows(dout), 0, HD, q);
    const TileRange tiles = key_tiles(rows.q0, kmin(S, rows.q0 + rows.rq), d.window, Bc);
    load_tile_async(x, Ks, Bc, HD, kv_rows(k, tiles.begin * Bc), 0, HD, k);
    load_tile_async(x, Vs, Bc, HD, kv_rows(v, tiles.begin * Bc), 0, HD, v);
    x.cp_async_commit();

    const int r_lo = slice * 16 + (l >> 2);
    const int64_t pos[2] = {rows.pos(r_lo), rows.pos(r_lo + 8)};
    int32_t seg_q[2];
    float lse2[2], dlt[2];
    GEMMAX_UNROLL
    for (int e = 0; e < 2; ++e) {
      const int64_t h = rows.head(r_lo + 8 * e), at = (b * d.H + h) * S + pos[e];
      const bool in = pos[e] < S;
      seg_q[e] = in ? seg[b * S + pos[e]] : 0;
      lse2[e] = in ? lse[at] * kLog2e : 0.0f;
      dlt[e] = in ? delta[at] : 0.0f;
    }
    const WarpSpan span = warp_span(x, pos, seg_q, S);
    float acc[kOt][4] = {};
    for (int64_t kt = tiles.begin; kt < tiles.end; ++kt) {
      const int64_t k0 = kt * Bc;
      if (x.tid() < Bc) segk[x.tid()] = k0 + x.tid() < S ? seg[b * S + k0 + x.tid()] : 0;
      x.template cp_async_wait<0>();
      x.sync();
      float s[kNt][4] = {}, dp[kNt][4] = {};
      GEMMAX_UNROLL
      for (int kk = 0; kk < 128; kk += 16) {
        uint32_t a[4], ad[4];
        load_a_frag(x, Qs, HD, false, slice * 16, part * 128 + kk, a);
        load_a_frag(x, Ds, HD, false, slice * 16, part * 128 + kk, ad);
        GEMMAX_UNROLL
        for (int nt = 0; nt < kNt; nt += 2) {
          uint32_t b0[2], b1[2];
          load_b_frags(x, Ks, HD, false, nt * 8, part * 128 + kk, b0, b1);
          x.mma_bf16(s[nt], a, b0);
          x.mma_bf16(s[nt + 1], a, b1);
          load_b_frags(x, Vs, HD, false, nt * 8, part * 128 + kk, b0, b1);
          x.mma_bf16(dp[nt], ad, b0);
          x.mma_bf16(dp[nt + 1], ad, b1);
        }
      }
      if constexpr (P > 1) {
        write_partial(x, xs, warp, F::kXs, s);
        write_partial(x, xp, warp, F::kXs, dp);
      }
      x.sync();  // partials written; every warp is done with the value tile
      if (kt + 1 < tiles.end) load_tile_async(x, Vs, Bc, HD, kv_rows(v, k0 + Bc), 0, HD, v);
      if constexpr (P > 1) {
        sum_partials(x, xs, slice * P, P, F::kXs, s);
        sum_partials(x, xp, slice * P, P, F::kXs, dp);
      }
      if (d.round_scores) round_acc(s);
      if (interior_keys(x, span, k0, Bc, segk, S, d.window)) {
        GEMMAX_UNROLL
        for (int nt = 0; nt < kNt; ++nt) {
          GEMMAX_UNROLL
          for (int i = 0; i < 4; ++i) {
            const int e = i >> 1;
            s[nt][i] = kexp2(s[nt][i] * kLog2e - lse2[e]) * (dp[nt][i] - dlt[e]);  // ds
          }
        }
      } else {
        GEMMAX_UNROLL
        for (int nt = 0; nt < kNt; ++nt) {
          GEMMAX_UNROLL
          for (int i = 0; i < 4; ++i) {
            const int e = i >> 1, col = nt * 8 + acc_col(l, i);
            const int64_t j = k0 + col;
            const bool vis = pos[e] < S && j < S && causal_visible(pos[e], j, d.window) &&
                             segk[col] == seg_q[e];
            const float p = vis ? kexp2(s[nt][i] * kLog2e - lse2[e]) : 0.0f;
            s[nt][i] = p * (dp[nt][i] - dlt[e]);  // ds
          }
        }
      }
      GEMMAX_UNROLL
      for (int kk = 0; kk < Bc / 16; ++kk) {
        uint32_t a[4];
        acc_to_a(s[2 * kk], s[2 * kk + 1], a);
        GEMMAX_UNROLL
        for (int nt = 0; nt < kOt; nt += 2) {
          uint32_t b0[2], b1[2];
          load_b_frags(x, Ks, HD, true, part * 128 + nt * 8, kk * 16, b0, b1);
          x.mma_bf16(acc[nt], a, b0);
          x.mma_bf16(acc[nt + 1], a, b1);
        }
      }
      x.sync();  // every warp is done with the key tile and the partials
      if (kt + 1 < tiles.end) load_tile_async(x, Ks, Bc, HD, kv_rows(k, k0 + Bc), 0, HD, k);
      x.cp_async_commit();
    }
    x.template cp_async_wait<0>();
    GEMMAX_UNROLL
    for (int e = 0; e < 2; ++e) {
      if (pos[e] >= S) continue;
      bf16* row = dq + ((b * S + pos[e]) * d.H + rows.head(r_lo + 8 * e)) * HD + part * 128;
      GEMMAX_UNROLL
      for (int nt = 0; nt < kOt; ++nt) {
        const int col = nt * 8 + 2 * (l & 3);
        row[col] = from_acc<bf16>(acc[nt][2 * e]);
        row[col + 1] = from_acc<bf16>(acc[nt][2 * e + 1]);
      }
    }
  }
};

// Keys per block Bk = 8192 / HD (16 at 512): warp (key slice, part) owns 16 keys x 64 columns
// of dk and dv; query rows come 32 positions of one head at a time, in two buffers: the next
// tile's q and dout (cp.async) and its log-sum-exp, delta and segments are loaded while the
// current one is computed.
template <int HD>
struct FlashDkv {
  static constexpr int kWarps = 8, kThreads = 32 * kWarps, kParts = HD / 64;
  static constexpr int kKeySlices = kWarps / kParts, Bk = 16 * kKeySlices, Rq = 32, kXs = Rq + 4;
  static constexpr int kQueryTile = 2 * Rq * HD;  // bf16: q then dout
  static constexpr size_t smem_bytes() {
    return size_t(2 * Bk * HD + 2 * kQueryTile) * 2 + size_t(2 * kWarps) * 16 * kXs * 4 +
           2 * 3 * Rq * 4;
  }
  static_assert(smem_bytes() <= 227 * 1024, "over Hopper's shared memory per block");
};

// The query tiles a dk/dv block visits, heads outer: tile t is head h0 + t / per_head at
// positions q_begin + (t % per_head) * Rq.
struct QueryTiles {
  int64_t h0, q_begin, per_head, count;
  GEMMAX_HD int64_t head(int64_t t) const { return h0 + t / per_head; }
  GEMMAX_HD int64_t q0(int64_t t, int rq) const { return q_begin + t % per_head * rq; }
};

template <int HD>
struct AttentionDkvMmaKernel {
  using F = FlashDkv<HD>;
  static constexpr int kMaxThreads = F::kThreads;
  // Grid (key tiles, KV, B).
  template <class X>
  GEMMAX_KFN void operator()(X& x, bf16* dk, bf16* dv, const bf16* q, const bf16* k, const bf16* v,
                             const bf16* dout, const float* lse, const float* delta,
                             const int32_t* seg, AttnDims d) const {
    constexpr int P = F::kParts, Rq = F::Rq, kNt = Rq / 8, kOt = 64 / 8;
    const int warp = x.tid() / kWarp, kslice = warp / P, part = warp % P, l = x.lane();
    const int64_t b = x.bz(), kvh = x.by(), k0 = int64_t(x.bx()) * F::Bk, S = d.S;
    bf16* Ks = x.template smem<bf16>();
    bf16* Vs = Ks + F::Bk * HD;
    bf16* Qbuf = Vs + F::Bk * HD;  // [2][q, dout]
    float* xs = reinterpret_cast<float*>(Qbuf + 2 * F::kQueryTile);
    float* xp = xs + F::kWarps * 16 * F::kXs;
    float* stats = xp + F::kWarps * 16 * F::kXs;  // [2][lse (base 2), delta, segment] per row
    auto kv_rows = [&](const bf16* base) {
      return [=](int r) -> const bf16* {
        return k0 + r < S ? base + ((b * S + k0 + r) * d.KV + kvh) * HD : nullptr;
      };
    };
    load_tile_async(x, Ks, F::Bk, HD, kv_rows(k), 0, HD, k);
    load_tile_async(x, Vs, F::Bk, HD, kv_rows(v), 0, HD, v);
    x.cp_async_commit();

    // This lane's two keys: slice rows g and g + 8.
    const int key_lo = kslice * 16 + (l >> 2);
    const int64_t key[2] = {k0 + key_lo, k0 + key_lo + 8};
    int32_t seg_k[2];
    GEMMAX_UNROLL
    for (int e = 0; e < 2; ++e) seg_k[e] = key[e] < S ? seg[b * S + key[e]] : 0;
    const WarpSpan span = warp_span(x, key, seg_k, S);
    float acc_k[kOt][4] = {}, acc_v[kOt][4] = {};
    const int64_t q_begin = k0 / Rq * Rq;
    const int64_t per_head =
        ceil_div(last_visible_query(kmin(S, k0 + F::Bk) - 1, S, d.window) + 1 - q_begin, Rq);
    const QueryTiles tiles{kvh * d.group(), q_begin, per_head, per_head * d.group()};
    // Starts the loads of query tile t into buffer t % 2: q and dout asynchronously (one commit
    // group), the per-row statistics with plain loads (read after the barrier that follows the
    // wait for the group).
    auto load_query_tile = [&](int64_t t) {
      const int64_t h = tiles.head(t), q0 = tiles.q0(t, Rq);
      bf16* Qs = Qbuf + (t & 1) * F::kQueryTile;
      auto q_rows = [&](const bf16* base) {
        return [=](int r) -> const bf16* {
          return q0 + r < S ? base + ((b * S + q0 + r) * d.H + h) * HD : nullptr;
        };
      };
      load_tile_async(x, Qs, Rq, HD, q_rows(q), 0, HD, q);
      load_tile_async(x, Qs + Rq * HD, Rq, HD, q_rows(dout), 0, HD, q);
      x.cp_async_commit();
      if (x.tid() < Rq) {
        float* st = stats + (t & 1) * 3 * Rq;
        const int64_t i = q0 + x.tid(), at = (b * d.H + h) * S + i;
        st[x.tid()] = i < S ? lse[at] * kLog2e : 0.0f;
        st[Rq + x.tid()] = i < S ? delta[at] : 0.0f;
        reinterpret_cast<int32_t*>(st + 2 * Rq)[x.tid()] = i < S ? seg[b * S + i] : 0;
      }
    };
    if (tiles.count > 0) load_query_tile(0);
    for (int64_t t = 0; t < tiles.count; ++t) {
      // Buffer (t + 1) % 2 was last read in iteration t - 1, which ended with a barrier.
      if (t + 1 < tiles.count)
        load_query_tile(t + 1);
      else
        x.cp_async_commit();          // an empty group: the wait below always leaves one in flight
      x.template cp_async_wait<1>();  // the key and value tiles and query tile t
      x.sync();
      const int64_t q0 = tiles.q0(t, Rq);
      const bf16* Qs = Qbuf + (t & 1) * F::kQueryTile;
      const bf16* Ds = Qs + Rq * HD;
      const float* lse_q = stats + (t & 1) * 3 * Rq;
      const float* delta_q = lse_q + Rq;
      const int32_t* seg_q = reinterpret_cast<const int32_t*>(delta_q + Rq);
      float s[kNt][4] = {}, dp[kNt][4] = {};
      GEMMAX_UNROLL
      for (int kk = 0; kk < 64; kk += 16) {
        uint32_t a[4], av[4];
        load_a_frag(x, Ks, HD, false, kslice * 16, part * 64 + kk, a);
        load_a_frag(x, Vs, HD, false, kslice * 16, part * 64 + kk, av);
        GEMMAX_UNROLL
        for (int nt = 0; nt < kNt; nt += 2) {
          uint32_t b0[2], b1[2];
          load_b_frags(x, Qs, HD, false, nt * 8, part * 64 + kk, b0, b1);
          x.mma_bf16(s[nt], a, b0);
          x.mma_bf16(s[nt + 1], a, b1);
          load_b_frags(x, Ds, HD, false, nt * 8, part * 64 + kk, b0, b1);
          x.mma_bf16(dp[nt], av, b0);
          x.mma_bf16(dp[nt + 1], av, b1);
        }
      }
      if constexpr (P > 1) {
        write_partial(x, xs, warp, F::kXs, s);
        write_partial(x, xp, warp, F::kXs, dp);
        x.sync();
        sum_partials(x, xs, kslice * P, P, F::kXs, s);
        sum_partials(x, xp, kslice * P, P, F::kXs, dp);
      }
      if (d.round_scores) round_acc(s);
      // s now holds p^T, dp becomes ds^T; the mask on boundary tiles only.
      const bool interior = interior_queries(x, span, q0, Rq, seg_q, S, d.window);
      GEMMAX_UNROLL
      for (int nt = 0; nt < kNt; ++nt) {
        GEMMAX_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int e = i >> 1, col = nt * 8 + acc_col(l, i);
          const int64_t qi = q0 + col;
          const bool vis =
              interior || (key[e] < S && qi < S && causal_visible(qi, key[e], d.window) &&
                           seg_q[col] == seg_k[e]);
          const float p = vis ? kexp2(s[nt][i] * kLog2e - lse_q[col]) : 0.0f;
          s[nt][i] = p;
          dp[nt][i] = p * (dp[nt][i] - delta_q[col]);
        }
      }
      GEMMAX_UNROLL
      for (int kk = 0; kk < Rq / 16; ++kk) {
        uint32_t ap[4], ads[4];
        acc_to_a(s[2 * kk], s[2 * kk + 1], ap);
        acc_to_a(dp[2 * kk], dp[2 * kk + 1], ads);
        GEMMAX_UNROLL
        for (int nt = 0; nt < kOt; nt += 2) {
          uint32_t b0[2], b1[2];
          load_b_frags(x, Ds, HD, true, part * 64 + nt * 8, kk * 16, b0, b1);
          x.mma_bf16(acc_v[nt], ap, b0);
          x.mma_bf16(acc_v[nt + 1], ap, b1);
          load_b_frags(x, Qs, HD, true, part * 64 + nt * 8, kk * 16, b0, b1);
          x.mma_bf16(acc_k[nt], ads, b0);
          x.mma_bf16(acc_k[nt + 1], ads, b1);
        }
      }
      x.sync();  // every warp is done with this query tile and the partials
    }
    x.template cp_async_wait<0>();
    GEMMAX_UNROLL
    for (int e = 0; e < 2; ++e) {
      if (key[e] >= S) continue;
      const int64_t at = ((b * S + key[e]) * d.KV + kvh) * HD + part * 64;
      GEMMAX_UNROLL
      for (int nt = 0; nt < kOt; ++nt) {
        const int col = nt * 8 + 2 * (l & 3);
        dk[at + col] = from_acc<bf16>(acc_k[nt][2 * e]);
        dk[at + col + 1] = from_acc<bf16>(acc_k[nt][2 * e + 1]);
        dv[at + col] = from_acc<bf16>(acc_v[nt][2 * e]);
        dv[at + col + 1] = from_acc<bf16>(acc_v[nt][2 * e + 1]);
      }
    }
  }
};

}  // namespace gemmax::kern

// The attention backward on Hopper's instructions (cuda_attention=sm90), head_dim 256 and 512:
// the contract of AttentionDqMmaKernel and AttentionDkvMmaKernel (attention_mma.h), which it is
// tested against, after the same row-dot pre-pass (AttentionDeltaKernel: delta_i = do_i . o_i).
// Causal, sliding window, segments, GQA, AttnDims::round_scores; no atomics: each output is
// owned by one block, and dk, dv sum the group's heads in head order, the same bits every run.
//
// Both kernels (this file: dk/dv; attention_sm90_bwd_dq.h: dq) are warp-specialised blocks of
// 384 threads: two consumer warpgroups (threads 0-255) running wgmma, and a producer warpgroup
// whose first warp loads by TMA. A block owns a 64-row tile (its keys or its queries), loaded
// once, and streams the other side's tiles through a ring: at head_dim 256 two stages of 64
// rows, at 512 one stage of 32 (AttnSm90Bwd). setmaxnreg moves registers from the producer
// (40 a thread) to the consumers (232): without it ptxas gives every thread of 384 only 168, and
// dk/dv spills. A tile is its rows of one head's columns, in boxes of rows x 64 (128-byte
// swizzle, the layout gmm_sm90.h uses): read as the K-major operand of a product over head_dim,
// or, through the transpose bit, as the MN-major operand of a product over its rows.
//
// TMA: q, k, v and do are [B, S, heads, hd]; one 3-D tensor map per tensor and box height covers
// it as {heads * hd, S, B}: head h's columns are h * hd .. h * hd + hd - 1, a 64-wide box never
// crosses a head, and rows past a sequence's end read as zeros, not as the next sequence's (a
// non-finite value there cannot reach this one's sums: 0 * inf would). No map per head, no
// plain loads.
//
// P and dS go through shared memory (wgmma with A in shared memory), not registers: the
// warpgroup that computes P (from S) is not the one that computes dS (from dP), so P crosses
// warpgroups anyway, in fp32 (dS = P (dP - delta) with the unrounded P, as the mma kernels).
// Their bf16 copies keep 64 columns a row whatever the stream's height (one 128-byte swizzle
// row), of which the first kStream are used.
//
// dk/dv (AttentionDkvSm90Kernel): one block per 64 keys of one kv head and 256 of its columns
// (head_dim 512: two blocks a key tile), iterating the query tiles that see them (heads of the
// group outer, positions inner; tiles wholly outside the window are never visited).
//   warpgroup 0: S^T = K Q^T (m64nRk16 over all of head_dim, both K-major), P^T = exp(S^T - lse)
//                masked, to shared memory (fp32 for warpgroup 1, bf16 as an operand);
//                dV += P^T dO (m64n128k16 per 128 columns, dO MN-major), dV's 64 x 256 fp32 in
//                its registers;
//   warpgroup 1: dP^T = V dO^T, dS^T = P^T (dP^T - delta) to shared memory (bf16);
//                dK += dS^T Q (Q MN-major), dK's 64 x 256 fp32 in its registers.
// Registers a consumer thread: 128 accumulators of dV or dK + R / 2 of S^T or dP^T, within 232.
// At head_dim 512 dV and dK would take 256 a thread, so the columns are split over two blocks,
// each computing the whole of S^T and dP^T: a third more tensor work than one block would do
// (the forward at 512 pays the same for the same reason).
// Shared memory (bytes), head_dim 256 | 512: K, V 2 x 32768 | 2 x 65536; the ring's Q and dO
// 2 stages x 65536 | 1 x 65536; P^T and dS^T bf16 2 x 8192; P^T fp32 16384 | 8192; the
// stages' lse, delta, segments; 9 mbarriers; up to 1024 to align the swizzle atoms:
// 232008 | 222664 of the 232448 (227 KiB) a block may have on H100/H200. One block an SM.
#pragma once

#include <type_traits>

#include "gemmax/backend/cuda/kernels/attention_mma.h"
#include "gemmax/backend/cuda/kernels/sm90_types.h"

namespace gemmax::kern {

// What both kernels share at every head_dim.
struct AttnSm90BwdBlock {
  static constexpr int kRows = 64;  // a block's own tile: its keys (dk/dv) or queries (dq)
  // Two consumer warpgroups, then the producer's: one warp of it works, all four give their
  // registers to the consumers (setmaxnreg: 128 x 40 + 256 x 232 of the SM's 65536).
  static constexpr int kConsumers = 256, kThreads = kConsumers + 128;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static constexpr uint32_t kSwizzleAtom = kSm90SwizzleAtom;
  static constexpr int box_elems(int rows) { return rows * 64; }
  static constexpr uint32_t box_bytes(int rows) { return uint32_t(rows) * 128; }
};

// The tiles at one head_dim: the ring's height and depth are what shared memory allows (the
// knobs for tuning on the GPU).
template <int kHd>
struct AttnSm90Bwd : AttnSm90BwdBlock {
  static_assert(kHd == 256 || kHd == 512, "the sm90 backward takes head_dim 256 and 512");
  static constexpr int HD = kHd, kColBlocks = HD / 64;
  static constexpr int kStream = HD == 256 ? 64 : 32;  // rows of a tile through the ring
  static constexpr int kStages = HD == 256 ? 2 : 1;
  static constexpr int kDkvParts = HD / 256;  // dk/dv blocks a key tile, 256 columns each
  static constexpr int kDqHalves = HD / 256;  // dQ's 128-column parts a warpgroup
  static constexpr int tile_elems(int rows) { return rows * HD; }
  static constexpr uint32_t tile_bytes(int rows) { return uint32_t(kColBlocks) * box_bytes(rows); }
};

// The kernels' arguments, in parameter space on the GPU (the TMA copies name the maps there).
struct AttnSm90BwdParams {
  bf16* dq;
  bf16* dk;
  bf16* dv;
  const float* lse;    // [B, H, S], natural log
  const float* delta;  // [B, H, S], do . o
  const int32_t* seg;  // [B * S]
  // {heads * hd, S, B}, boxes of 64 columns, 128-byte swizzle; 64 rows for the block's own
  // tiles, AttnSm90Bwd::kStream for the ring's.
  TensorMap3d q, k, v, dout;
  AttnDims d;
};

// The `rows` rows from position i of sequence b, columns [col, col + hd) (one head): a box per
// 64 columns, completing on `bar`.
template <class A, class X>
GEMMAX_KFN void sm90_load_tile(X& x, bf16* dst, const TensorMap3d& map, int rows, int64_t b,
                               int64_t i, int64_t col, uint64_t* bar) {
  GEMMAX_UNROLL
  for (int c = 0; c < A::kColBlocks; ++c)
    x.tma_load_3d(dst + c * A::box_elems(rows), map, int32_t(col + 64 * c), int32_t(i),
                  int32_t(b), bar);
}

// The descriptor of a tile (boxes of box_bytes) as the K-major operand of a product over
// head_dim, at column kk.
GEMMAX_HD uint64_t sm90_head_desc(uint32_t tile_at, uint32_t box_bytes, int kk) {
  return wgmma_desc(tile_at + uint32_t(kk / 64) * box_bytes + uint32_t(kk % 64) * 2, 16, 1024,
                    Swizzle::k128B);
}
// A tile's columns [128 h, 128 h + 128) as the MN-major B of a product over its rows, at row kk:
// one 128-byte row per reduction index, the two 64-wide boxes box_bytes apart (leading byte
// offset).
GEMMAX_HD uint64_t sm90_rows_desc(uint32_t tile_at, uint32_t box_bytes, int h, int kk) {
  return wgmma_desc(tile_at + uint32_t(2 * h) * box_bytes + uint32_t(kk) * 128, box_bytes, 1024,
                    Swizzle::k128B);
}
// A 64 x 64 bf16 tile (P^T, dS^T, dS) as the K-major A of a product over its columns.
GEMMAX_HD uint64_t sm90_square_desc(uint32_t at, int kk) {
  return wgmma_desc(at + uint32_t(kk) * 2, 16, 1024, Swizzle::k128B);
}

// acc (+)= the product of a 64-row tile and an N-row tile over head_dim (S or dP, 64 x N).
template <class A, int N, class X>
GEMMAX_KFN void sm90_head_product(X& x, float (&acc)[N / 2], uint32_t a_at, uint32_t b_at) {
  x.wgmma_fence_operand(acc);
  x.wgmma_fence();
  GEMMAX_UNROLL
  for (int kk = 0; kk < A::HD; kk += 16)
    x.template wgmma_bf16<N>(acc, sm90_head_desc(a_at, A::box_bytes(A::kRows), kk),
                             sm90_head_desc(b_at, A::box_bytes(N), kk), kk > 0);
  x.wgmma_commit();
  x.template wgmma_wait<0>();
  x.wgmma_fence_operand(acc);
}
// acc[j] += a (64 x kRed of a 64 x 64 bf16 tile in shared memory) . columns
// [128 h, 128 h + 128) of the kRed-row tile at b_at, for the kHalves parts h = h0 + j.
template <int kHalves, int kRed, class X>
GEMMAX_KFN void sm90_rows_product(X& x, float (&acc)[kHalves][64], int h0, uint32_t a_at,
                                  uint32_t b_at) {
  GEMMAX_UNROLL
  for (int j = 0; j < kHalves; ++j) x.wgmma_fence_operand(acc[j]);
  x.wgmma_fence();
  GEMMAX_UNROLL
  for (int kk = 0; kk < kRed; kk += 16) {
    GEMMAX_UNROLL
    for (int j = 0; j < kHalves; ++j)
      x.template wgmma_bf16<128, false, true>(
          acc[j], sm90_square_desc(a_at, kk),
          sm90_rows_desc(b_at, AttnSm90BwdBlock::box_bytes(kRed), h0 + j, kk), true);
  }
  x.wgmma_commit();
  x.template wgmma_wait<0>();
  GEMMAX_UNROLL
  for (int j = 0; j < kHalves; ++j) x.wgmma_fence_operand(acc[j]);
}

// AttnDims::round_scores: a score accumulator rounded to bf16.
template <int N>
GEMMAX_HD void sm90_round_scores(float (&sc)[N]) {
  GEMMAX_UNROLL
  for (int i = 0; i < N; ++i) sc[i] = to_acc(from_acc<bf16>(sc[i]));
}

// The mbarriers of both kernels.
struct AttnSm90Bars {
  uint64_t* base;
  GEMMAX_HD uint64_t* full(int st) const { return base + st; }       // producer -> consumers
  GEMMAX_HD uint64_t* empty(int st) const { return base + 2 + st; }  // consumers -> producer
  GEMMAX_HD uint64_t* once() const { return base + 4; }              // the block's fixed tiles
  GEMMAX_HD uint64_t* p_ready() const { return base + 5; }           // P written
  GEMMAX_HD uint64_t* p_free() const { return base + 6; }            // P read
  GEMMAX_HD uint64_t* ds_ready() const { return base + 7; }          // dS written
  GEMMAX_HD uint64_t* ds_free() const { return base + 8; }           // dS read
  static constexpr int kCount = 9, kMaxStages = 2;
  // A buffer that a wgmma reads is free once every thread of the reading warpgroup has waited
  // for its products (wait_group completes them thread by thread), hence the counts: the
  // readers' threads of P and dS, 128 or 256.
  template <int kStages, class X>
  GEMMAX_KFN void init(X& x, uint32_t p_readers, uint32_t ds_readers) const {
    static_assert(kStages <= kMaxStages, "two full and two empty barriers");
    if (x.tid() == 0) {
      for (int st = 0; st < kStages; ++st) {
        x.mbarrier_init(full(st), 32);  // every producer lane (statistics), one with the bytes
        x.mbarrier_init(empty(st), AttnSm90BwdBlock::kConsumers);
      }
      x.mbarrier_init(once(), 1);
      x.mbarrier_init(p_ready(), 128);
      x.mbarrier_init(p_free(), p_readers);
      x.mbarrier_init(ds_ready(), 128);
      x.mbarrier_init(ds_free(), ds_readers);
      x.fence_proxy_async();
    }
    x.sync();
  }
};

// Phase n of a barrier used once per tile completes at tile n; a stage's at every kStages-th.
GEMMAX_HD uint32_t sm90_parity(int64_t n) { return uint32_t(n & 1); }
template <int kStages>
GEMMAX_HD uint32_t sm90_stage_parity(int64_t n) {
  return uint32_t((n / kStages) & 1);
}

// Two tiles of `rows` rows (position i of sequence b, columns [col, col + hd)) onto `bar`,
// with the bytes it expects: the block's own pair or a ring stage's.
template <class A, class X>
GEMMAX_KFN void sm90_load_pair(X& x, uint64_t* bar, int rows, int64_t b, int64_t i, int64_t col,
                               bf16* dst0, const TensorMap3d& map0, bf16* dst1,
                               const TensorMap3d& map1) {
  x.mbarrier_arrive_expect_tx(bar, 2 * A::tile_bytes(rows));
  sm90_load_tile<A>(x, dst0, map0, rows, b, i, col, bar);
  sm90_load_tile<A>(x, dst1, map1, rows, b, i, col, bar);
}

// The producer warpgroup of both kernels: it gives its registers to the consumers, and its first
// warp loads. Lane 0 loads the block's own tiles (own(bar.once())); then for each of `count`
// ring tiles: fetch(lane, n) reads the tile's per-row values from global memory into registers
// before waiting for its stage (the wait hides their latency, which would otherwise delay the
// TMA on every tile: with one stage, on the critical path); once the stage is free,
// stage(lane, n, st, values) writes them to it and, on lane 0, then loads the tile's pair onto
// bar.full(st), whose arrival comes after lane 0's own writes; the other lanes arrive.
template <class A, class X, class Own, class Fetch, class Stage>
GEMMAX_KFN void sm90_produce(X& x, const AttnSm90Bars& bar, int64_t count, Own&& own,
                             Fetch&& fetch, Stage&& stage) {
  constexpr int kStages = A::kStages;
  x.template setmaxnreg_dec<A::kProducerRegs>();
  const int lane = x.tid() - A::kConsumers;
  if (lane >= 32) return;
  if (lane == 0) own(bar.once());
  for (int64_t n = 0; n < count; ++n) {
    const int st = int(n % kStages);
    const auto values = fetch(lane, n);
    if (n >= kStages) x.mbarrier_wait(bar.empty(st), sm90_stage_parity<kStages>(n - kStages));
    stage(lane, n, st, values);
    if (lane != 0) x.mbarrier_arrive(bar.full(st));
  }
}

// A producer lane's share of a ring tile's per-row values: rows lane, lane + 32, ...
template <class T, int R>
struct Sm90LaneRows {
  T v[R / 32];
};

// P in fp32 is R floats a row, its columns XOR-permuted by row (bits 3-4 by row % 4), read and
// written as pairs (columns c, c + 1 of an accumulator slice): the 16 lanes of a half-warp then
// cover all 32 banks once, where the plain [row][col] layout put 8 lanes on each bank.
struct alignas(8) FloatPair {
  float lo, hi;
};
template <int R, class F>  // F: float or const float
GEMMAX_HD auto& sm90_pf_pair(F* pf, int r, int c) {
  static_assert(R % 32 == 0, "the permutation stays within 32 columns");
  using Pair = std::conditional_t<std::is_const_v<F>, const FloatPair, FloatPair>;
  return *reinterpret_cast<Pair*>(pf + r * R + (c ^ ((r & 3) << 3)));
}

// Warpgroup 1's part of tile n in both kernels: once P (fp32, sm90_pf_pair) is ready,
// dS = P (dP - delta(i, col)) from its dP accumulator; once dS's last readers are done, dS to the
// bf16 tile at `ds` (64 columns a row), visible to wgmma, and ready.
template <int R, class X, class Delta>
GEMMAX_KFN void sm90_write_ds(X& x, const AttnSm90Bars& bar, int64_t n, int tig,
                              const float (&dp)[R / 2], const float* pf, bf16* ds, Delta&& delta) {
  x.mbarrier_wait(bar.p_ready(), sm90_parity(n));
  float d[R / 2];
  GEMMAX_UNROLL
  for (int i = 0; i < R / 2; i += 2) {
    const int r = wgmma_acc_row(tig, i), c = wgmma_acc_col(tig, i);
    const FloatPair pr = sm90_pf_pair<R>(pf, r, c);
    d[i] = pr.lo * (dp[i] - delta(i, c));
    d[i + 1] = pr.hi * (dp[i + 1] - delta(i + 1, c + 1));
  }
  x.mbarrier_arrive(bar.p_free());
  if (n > 0) x.mbarrier_wait(bar.ds_free(), sm90_parity(n - 1));
  GEMMAX_UNROLL
  for (int i = 0; i < R / 2; ++i)
    ds[swizzled(wgmma_acc_row(tig, i), wgmma_acc_col(tig, i), 64)] = from_acc<bf16>(d[i]);
  x.fence_proxy_async();  // dS before wgmma's (async proxy) reads
  x.mbarrier_arrive(bar.ds_ready());
}

// A consumer's kParts x 128 accumulated columns to bf16: accumulator row r to out[(row0 + r) *
// stride + 128 j + col] for the rows before S.
template <int kParts>
GEMMAX_HD void sm90_store_acc(const float (&acc)[kParts][64], int tig, bf16* out, int64_t row0,
                              int64_t S, int64_t stride) {
  GEMMAX_UNROLL
  for (int j = 0; j < kParts; ++j) {
    GEMMAX_UNROLL
    for (int i = 0; i < 64; i += 2) {
      const int64_t pos = row0 + wgmma_acc_row(tig, i);
      if (pos >= S) continue;
      bf16* row = out + pos * stride + 128 * j + wgmma_acc_col(tig, i);
      row[0] = from_acc<bf16>(acc[j][i]);
      row[1] = from_acc<bf16>(acc[j][i + 1]);
    }
  }
}

template <class A>
struct AttnSm90DkvSmem {
  static constexpr int R = A::kStream;
  char* base;
  GEMMAX_HD bf16* k() const { return reinterpret_cast<bf16*>(base); }
  GEMMAX_HD bf16* v() const { return k() + A::tile_elems(64); }
  GEMMAX_HD bf16* q(int st) const { return v() + A::tile_elems(64) + st * 2 * A::tile_elems(R); }
  GEMMAX_HD bf16* dout(int st) const { return q(st) + A::tile_elems(R); }
  GEMMAX_HD bf16* pt() const { return q(A::kStages); }  // P^T, bf16, 64 keys x 64 (R used)
  GEMMAX_HD bf16* dst() const { return pt() + 64 * 64; }
  GEMMAX_HD float* pf() const {  // [key][q], sm90_pf_pair
    return reinterpret_cast<float*>(dst() + 64 * 64);
  }
  // Per stage, per query row: lse (base 2), delta, segment.
  GEMMAX_HD float* lse2(int st) const { return pf() + 64 * R + st * 3 * R; }
  GEMMAX_HD float* delta(int st) const { return lse2(st) + R; }
  GEMMAX_HD int32_t* seg(int st) const { return reinterpret_cast<int32_t*>(delta(st) + R); }
  GEMMAX_HD AttnSm90Bars bars() const {
    return {reinterpret_cast<uint64_t*>(lse2(A::kStages))};
  }
  static constexpr size_t bytes() {
    return A::kSwizzleAtom + (2 * size_t(A::tile_elems(64)) + 2 * A::kStages * A::tile_elems(R)) * 2 +
           2 * 64 * 64 * 2 + 64 * R * 4 + A::kStages * 3 * R * 4 + AttnSm90Bars::kCount * 8;
  }
};
static_assert(AttnSm90DkvSmem<AttnSm90Bwd<256>>::bytes() <= 227 * 1024 &&
                  AttnSm90DkvSmem<AttnSm90Bwd<512>>::bytes() <= 227 * 1024,
              "over Hopper's shared memory per block");

// Grid (key tiles of 64 x kDkvParts column parts, KV, B).
template <int HD>
struct AttentionDkvSm90Kernel {
  using A = AttnSm90Bwd<HD>;
  static constexpr int R = A::kStream, kStages = A::kStages;
  static constexpr int kMaxThreads = A::kThreads;
  static constexpr bool kGridConstant = true;
  template <class X>
  GEMMAX_KFN void operator()(X& x, const AttnSm90BwdParams& p) const {
    const AttnDims& d = p.d;
    const int part = int(x.bx() % A::kDkvParts);
    const int64_t b = x.bz(), kvh = x.by(), k0 = int64_t(x.bx() / A::kDkvParts) * A::kRows;
    const int64_t S = d.S;
    const AttnSm90DkvSmem<A> s{sm90_aligned_smem(x)};
    const AttnSm90Bars bar = s.bars();
    // P: fp32 by warpgroup 1, bf16 by 0's wgmma; dS^T: 1's wgmma.
    bar.template init<kStages>(x, 256, 128);
    const int64_t per_head = ceil_div(
        last_visible_query(kmin(S, k0 + A::kRows) - 1, S, d.window) + 1 - k0, int64_t(R));
    const QueryTiles tiles{kvh * d.group(), k0, per_head, per_head * d.group()};

    if (x.tid() >= A::kConsumers) {
      sm90_produce<A>(
          x, bar, tiles.count,
          [&](uint64_t* once) {
            sm90_load_pair<A>(x, once, A::kRows, b, k0, kvh * HD, s.k(), p.k, s.v(), p.v);
          },
          [&](int lane, int64_t n) {  // the query rows' lse (base 2), delta, segment
            struct {
              Sm90LaneRows<float, R> lse2, delta;
              Sm90LaneRows<int32_t, R> seg;
            } v;
            const int64_t h = tiles.head(n), q0 = tiles.q0(n, R);
            GEMMAX_UNROLL
            for (int j = 0; j < R / 32; ++j) {
              const int64_t i = q0 + lane + 32 * j, at = (b * d.H + h) * S + i;
              v.lse2.v[j] = i < S ? p.lse[at] * kLog2e : 0.0f;
              v.delta.v[j] = i < S ? p.delta[at] : 0.0f;
              v.seg.v[j] = i < S ? p.seg[b * S + i] : 0;
            }
            return v;
          },
          [&](int lane, int64_t n, int st, const auto& v) {
            GEMMAX_UNROLL
            for (int j = 0; j < R / 32; ++j) {
              s.lse2(st)[lane + 32 * j] = v.lse2.v[j];
              s.delta(st)[lane + 32 * j] = v.delta.v[j];
              s.seg(st)[lane + 32 * j] = v.seg.v[j];
            }
            if (lane == 0)
              sm90_load_pair<A>(x, bar.full(st), R, b, tiles.q0(n, R), tiles.head(n) * HD,
                                s.q(st), p.q, s.dout(st), p.dout);
          });
      return;
    }

    x.template setmaxnreg_inc<A::kConsumerRegs>();
    const int wg = x.tid() / 128, tig = x.tid() % 128;
    // This thread's two keys (accumulator rows) and their segments.
    const int r_lo = wgmma_acc_row(tig, 0);
    int32_t seg_k[2];
    GEMMAX_UNROLL
    for (int e = 0; e < 2; ++e) {
      const int64_t j = k0 + r_lo + 8 * e;
      seg_k[e] = j < S ? p.seg[b * S + j] : 0;
    }

    // Warpgroup 0: dV, warpgroup 1: dK; columns 256 part + [128 h, 128 h + 128).
    float acc[2][64] = {};
    x.mbarrier_wait(bar.once(), 0);
    const uint32_t k_at = x.shared_addr(s.k()), v_at = x.shared_addr(s.v());
    const uint32_t pt_at = x.shared_addr(s.pt()), dst_at = x.shared_addr(s.dst());
    for (int64_t n = 0; n < tiles.count; ++n) {
      const int st = int(n % kStages);
      const int64_t q0 = tiles.q0(n, R);
      const uint32_t q_at = x.shared_addr(s.q(st)), do_at = x.shared_addr(s.dout(st));
      x.mbarrier_wait(bar.full(st), sm90_stage_parity<kStages>(n));
      float sc[R / 2] = {};
      if (wg == 0) {
        sm90_head_product<A, R>(x, sc, k_at, q_at);  // S^T
        if (d.round_scores) sm90_round_scores(sc);
        if (n > 0) x.mbarrier_wait(bar.p_free(), sm90_parity(n - 1));
        // The mask on boundary tiles only (attention_tiles.h, interior tiles); the warp's span
        // of keys is found again each tile rather than held in registers through the loop.
        const int64_t keys[2] = {k0 + r_lo, k0 + r_lo + 8};
        const bool interior =
            interior_queries(x, warp_span(x, keys, seg_k, S), q0, R, s.seg(st), S, d.window);
        GEMMAX_UNROLL
        for (int i = 0; i < R / 2; i += 2) {  // columns c, c + 1 of row r: P^T
          const int r = wgmma_acc_row(tig, i), c = wgmma_acc_col(tig, i);
          const int64_t key = k0 + r;
          float pr[2];
          GEMMAX_UNROLL
          for (int u = 0; u < 2; ++u) {
            const int64_t qi = q0 + c + u;
            const bool vis = interior || (key < S && qi < S && causal_visible(qi, key, d.window) &&
                                          s.seg(st)[c + u] == seg_k[(i & 3) >> 1]);
            pr[u] = vis ? kexp2(sc[i + u] * kLog2e - s.lse2(st)[c + u]) : 0.0f;
          }
          sm90_pf_pair<R>(s.pf(), r, c) = {pr[0], pr[1]};
          *reinterpret_cast<uint32_t*>(s.pt() + swizzled(r, c, 64)) = pack_bf16(pr[0], pr[1]);
        }
        x.fence_proxy_async();  // P^T before wgmma's (async proxy) reads
        x.mbarrier_arrive(bar.p_ready());
        x.mbarrier_wait(bar.p_ready(), sm90_parity(n));
        sm90_rows_product<2, R>(x, acc, 2 * part, pt_at, do_at);  // dV += P^T dO
        x.mbarrier_arrive(bar.p_free());
      } else {
        sm90_head_product<A, R>(x, sc, v_at, do_at);  // dP^T
        sm90_write_ds<R>(x, bar, n, tig, sc, s.pf(), s.dst(),
                         [&](int, int c) { return s.delta(st)[c]; });
        x.mbarrier_wait(bar.ds_ready(), sm90_parity(n));
        sm90_rows_product<2, R>(x, acc, 2 * part, dst_at, q_at);  // dK += dS^T Q
        x.mbarrier_arrive(bar.ds_free());
      }
      x.mbarrier_arrive(bar.empty(st));
    }

    bf16* out = wg == 0 ? p.dv : p.dk;
    sm90_store_acc(acc, tig, out + (b * S * d.KV + kvh) * HD + 256 * part, k0, S, d.KV * HD);
  }
};

}  // namespace gemmax::kern

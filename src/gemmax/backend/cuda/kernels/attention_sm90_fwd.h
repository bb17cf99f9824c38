// Flash attention forward on Hopper's instructions (cuda_attention=sm90), FlashAttention-3's
// design: the contract of AttentionForwardMmaKernel (attention_mma.h), which it is tested
// against: the GQA head blocks (FlashRows), causal, sliding-window and segment masks, key tiles
// wholly outside the window never visited, interior tiles unmasked, AttnDims::round_scores, o
// and the log-sum-exp that the backward reads.
//
// Warp specialisation. A block is kConsumers warpgroups and a producer warpgroup (the last;
// setmaxnreg gives its registers to the consumers: 24 and 240 a thread):
//   - the producer's thread 0 brings each key tile and value tile by TMA (a 3-D map over
//     [B, S, KV, hd] read as {KV * hd, S, B}: one box per 64 columns, the keys of one kv head of
//     one sequence, zeros past the sequence's end) into a ring of kStages stages, K and V on
//     their own mbarriers so that the next key tile loads while this one's values are used;
//   - the consumers compute S = Q K^T by wgmma from shared memory (Q and K K-major), the online
//     softmax in fp32 on the accumulator fragments, then O += P V by wgmma with P in registers
//     (the accumulator of S is, slice for slice, the A fragment of the register-A form: no
//     round trip through shared memory, no barrier between the warps of a warpgroup), V read
//     MN-major. After each product a consumer thread arrives on the stage's `empty` barrier,
//     which the producer waits for before it refills the stage.
// Q (a gather: a block's rows are hb heads of one kv group) is copied once by every thread with
// cp.async into the same swizzled layout, then fence.proxy.async and one block barrier.
//
// head_dim 256: two warpgroups of 64 query rows each (128 rows a block), key tiles of 64, two
// stages. head_dim 512: the 64 x 512 fp32 output would be 256 registers a thread, so the two
// warpgroups share 64 rows and split the output columns (256 each); each computes the whole
// S = Q K^T itself (the same instructions on the same shared memory: the same bits), so no
// score crosses between them and there is no barrier but the ring's; the price is Q K^T twice,
// half again the tensor work of one shared S (3 products of 64 x 64 x 512 a tile, not 2; an
// exchange through shared memory would need a named barrier per tile and 32 KiB more). One stage: the ring holds a key and a value tile.
//
// Shared memory (from a 1024-byte-aligned start; 227 KiB a block on H100/H200):
//   head_dim 256: Q 128 x 256 (64 KiB) + 2 stages x (K 64 x 256 + V 64 x 256) (128 KiB)
//                 + barriers = 193 KiB with the alignment slack;
//   head_dim 512: Q 64 x 512 (64 KiB) + 1 stage x (K 64 x 512 + V 64 x 512) (128 KiB)
//                 + barriers = 193 KiB.
// 128-key tiles (the ask) fit only single-buffered at head_dim 256 (Q 64 + K 64 + V 64
// KiB) and not at all at 512; Bc and kStages are the two knobs for the GPU to settle.
// Registers a consumer thread: O 128 (64 x 256 fp32 over 128 threads), S 32, P 16 (bf16 pairs),
// within setmaxnreg's 240 (ptxas: no spills; 168 without setmaxnreg spilled ~900 bytes).
// Every operand is in the 128-byte-swizzled layout: 64 bfloat16 per 128-byte row, 8-row atoms of
// 1024 bytes, a tile of hd columns stored as hd / 64 blocks of [rows][64].
#pragma once

#include "gemmax/backend/cuda/kernels/attention_mma.h"
#include "gemmax/backend/cuda/kernels/sm90_types.h"

namespace gemmax::kern {

template <int HD>
struct FlashSm90 {
  static_assert(HD == 256 || HD == 512, "the sm90 attention forward takes head_dim 256 or 512");
  static constexpr int kConsumers = 2, kParts = HD / 256;  // output column parts of 256
  static constexpr int R = 64 * kConsumers / kParts;       // query rows a block
  static constexpr int Bc = 64, kStages = HD == 256 ? 2 : 1;
  // A producer warpgroup (of which one thread works): ptxas budgets registers for 128-thread
  // warpgroups, and setmaxnreg moves them from the producer to the consumers.
  static constexpr int kConsumerThreads = 128 * kConsumers, kThreads = kConsumerThreads + 128;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumerThreads <= 65536);
  static constexpr int kBlocks = HD / 64;  // 64-column blocks of a row
  static constexpr uint32_t kQBytes = uint32_t(R) * HD * 2, kTileBytes = uint32_t(Bc) * HD * 2;
  static constexpr uint32_t kAtom = kSm90SwizzleAtom;
  static constexpr size_t smem_bytes() {
    return kAtom + kQBytes + size_t(2 * kStages) * kTileBytes + 4 * kStages * 8;
  }
  static_assert(smem_bytes() <= 227 * 1024, "over Hopper's shared memory per block");
};

struct AttentionSm90Params {
  bf16* o;
  float* lse;
  const bf16* q;
  const int32_t* seg;
  TensorMap3d k, v;  // {KV * hd, S, B}, box 64 x Bc x 1, 128-byte swizzle
  AttnDims d;
  int hb;  // heads a block (heads_per_block)
};

// Shared memory: Q, the K stages, the V stages, then the barriers (full: the tile landed;
// empty: every consumer thread is done with it).
template <int HD>
struct FlashSm90Smem {
  using F = FlashSm90<HD>;
  char* base;
  template <class X>
  GEMMAX_KFN static FlashSm90Smem of(X& x) {
    return {sm90_aligned_smem(x)};
  }
  GEMMAX_HD bf16* q() const { return reinterpret_cast<bf16*>(base); }
  GEMMAX_HD bf16* k(int st) const {
    return reinterpret_cast<bf16*>(base + F::kQBytes + st * F::kTileBytes);
  }
  GEMMAX_HD bf16* v(int st) const {
    return reinterpret_cast<bf16*>(base + F::kQBytes + (F::kStages + st) * F::kTileBytes);
  }
  GEMMAX_HD uint64_t* bar(int which, int st) const {  // 0 k full, 1 v full, 2 k empty, 3 v empty
    return reinterpret_cast<uint64_t*>(base + F::kQBytes + 2 * F::kStages * F::kTileBytes) +
           which * F::kStages + st;
  }
};

template <int HD>
struct AttentionForwardSm90Kernel {
  using F = FlashSm90<HD>;
  static constexpr int kMaxThreads = F::kThreads;
  static constexpr bool kGridConstant = true;
  template <class X>
  GEMMAX_KFN void operator()(X& x, const AttentionSm90Params& p) const {
    constexpr int Bc = F::Bc, kNt = Bc / 8;
    const AttnDims& d = p.d;
    const FlashRows rows = FlashRows::of(x, d, F::R, p.hb);
    const FlashSm90Smem<HD> s = FlashSm90Smem<HD>::of(x);
    const int64_t b = rows.b, S = d.S;

    // Q, gathered: row r is head rows.head(r) at position rows.pos(r); zeros past the sequence.
    for (int e = x.tid(); e < F::R * (HD / 8); e += x.nthreads()) {
      const int r = e / (HD / 8), c = (e % (HD / 8)) * 8;
      const int64_t i = rows.pos(r);
      const bool valid = i < S;
      x.cp_async16(s.q() + (c / 64) * F::R * 64 + swizzled(r, c % 64, 64),
                   valid ? p.q + ((b * S + i) * d.H + rows.head(r)) * HD + c : p.q, valid);
    }
    x.cp_async_commit();
    if (x.tid() == 0) {
      for (int st = 0; st < F::kStages; ++st) {
        x.mbarrier_init(s.bar(0, st), 1);
        x.mbarrier_init(s.bar(1, st), 1);
        x.mbarrier_init(s.bar(2, st), F::kConsumerThreads);
        x.mbarrier_init(s.bar(3, st), F::kConsumerThreads);
      }
    }
    x.template cp_async_wait<0>();
    x.fence_proxy_async();  // Q and the barriers as wgmma and TMA (the async proxy) see them
    x.sync();

    const int64_t q_hi = kmin(S, rows.q0 + rows.rq);
    const TileRange tiles = key_tiles(rows.q0, q_hi, d.window, Bc);
    if (x.tid() >= F::kConsumerThreads) {  // the producer warpgroup
      x.template setmaxnreg_dec<F::kProducerRegs>();
      if (x.tid() != F::kConsumerThreads) return;
      const int32_t col0 = int32_t(rows.kvh * HD);
      for (int64_t n = 0; n < tiles.end - tiles.begin; ++n) {
        const int st = int(n % F::kStages);
        const int64_t use = n / F::kStages;
        const int32_t k0 = int32_t((tiles.begin + n) * Bc);
        for (int which = 0; which < 2; ++which) {
          if (use > 0) x.mbarrier_wait(s.bar(2 + which, st), uint32_t((use - 1) & 1));
          x.mbarrier_arrive_expect_tx(s.bar(which, st), F::kTileBytes);
          bf16* dst = which == 0 ? s.k(st) : s.v(st);
          for (int cb = 0; cb < F::kBlocks; ++cb)
            x.tma_load_3d(dst + cb * Bc * 64, which == 0 ? p.k : p.v, col0 + cb * 64, k0,
                          int32_t(b), s.bar(which, st));
        }
      }
      return;
    }

    // A consumer thread: warpgroup wg takes 64 rows (row group) and 256 output columns (part).
    x.template setmaxnreg_inc<F::kConsumerRegs>();
    const int wg = x.tid() / 128, tig = x.tid() % 128, l = x.lane();
    const int row0 = (wg / F::kParts) * 64, part = wg % F::kParts;
    const int r_lo = row0 + 16 * (tig / 32) + (l >> 2);  // this lane's rows: r_lo and r_lo + 8
    const int64_t pos[2] = {rows.pos(r_lo), rows.pos(r_lo + 8)};
    int32_t seg_q[2];
    GEMMAX_UNROLL
    for (int e = 0; e < 2; ++e) seg_q[e] = pos[e] < S ? p.seg[b * S + pos[e]] : 0;
    const WarpSpan span = warp_span(x, pos, seg_q, S);
    const uint32_t q_at = x.shared_addr(s.q()) + uint32_t(row0) * 128;
    float m[2] = {kNegInf, kNegInf}, lsum[2] = {0, 0};
    float acc[128] = {};  // 64 x 256 fp32: this warpgroup's output columns
    for (int64_t n = 0; n < tiles.end - tiles.begin; ++n) {
      const int st = int(n % F::kStages);
      const uint32_t parity = uint32_t((n / F::kStages) & 1);
      const int64_t k0 = (tiles.begin + n) * Bc;
      float sc[Bc / 2];
      x.mbarrier_wait(s.bar(0, st), parity);
      x.wgmma_fence_operand(sc);
      x.wgmma_fence();
      const uint32_t k_at = x.shared_addr(s.k(st));
      GEMMAX_UNROLL
      for (int kk = 0; kk < HD / 16; ++kk) {
        const uint32_t blk = uint32_t(kk / 4), in_blk = uint32_t(kk % 4) * 32;
        x.template wgmma_bf16<Bc>(
            sc, wgmma_desc(q_at + blk * F::R * 128 + in_blk, 16, 1024, Swizzle::k128B),
            wgmma_desc(k_at + blk * Bc * 128 + in_blk, 16, 1024, Swizzle::k128B), kk > 0);
      }
      x.wgmma_commit();
      x.template wgmma_wait<0>();
      x.wgmma_fence_operand(sc);
      x.mbarrier_arrive(s.bar(2, st));  // this thread is done with the key tile

      // Mask (boundary tiles only), then the online softmax in base 2, as the mma kernel.
      if (d.round_scores) {
        GEMMAX_UNROLL
        for (int i = 0; i < Bc / 2; ++i) sc[i] = to_acc(from_acc<bf16>(sc[i]));
      }
      float tmax[2] = {kNegInf, kNegInf};
      const int32_t* segk = p.seg + b * S + k0;  // read only where k0 + c < S
      if (interior_keys(x, span, k0, Bc, segk, S, d.window)) {
        GEMMAX_UNROLL
        for (int i = 0; i < Bc / 2; ++i) {
          sc[i] *= kLog2e;
          tmax[(i & 3) >> 1] = kmax(tmax[(i & 3) >> 1], sc[i]);
        }
      } else {
        GEMMAX_UNROLL
        for (int i = 0; i < Bc / 2; ++i) {
          const int e = (i & 3) >> 1, col = wgmma_acc_col(tig, i);
          const int64_t j = k0 + col;
          const bool vis =
              pos[e] < S && j < S && causal_visible(pos[e], j, d.window) && segk[col] == seg_q[e];
          sc[i] = vis ? sc[i] * kLog2e : kNegInf;
          tmax[e] = kmax(tmax[e], sc[i]);
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
      for (int i = 0; i < Bc / 2; ++i) {
        const int e = (i & 3) >> 1;
        sc[i] = sc[i] == kNegInf ? 0.0f : kexp2(sc[i] - m[e]);
        rsum[e] += sc[i];
      }
      GEMMAX_UNROLL
      for (int e = 0; e < 2; ++e) lsum[e] = lsum[e] * scale[e] + quad_sum(x, rsum[e]);
      GEMMAX_UNROLL
      for (int i = 0; i < 128; ++i) acc[i] *= scale[(i & 3) >> 1];
      // P as the A fragments of the k16 steps: slices 2 kk and 2 kk + 1 of the accumulator.
      uint32_t pa[kNt / 2][4];
      GEMMAX_UNROLL
      for (int kk = 0; kk < kNt / 2; ++kk) {
        GEMMAX_UNROLL
        for (int i = 0; i < 4; ++i)
          pa[kk][i] = pack_bf16(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1]);
      }

      x.mbarrier_wait(s.bar(1, st), parity);
      GEMMAX_UNROLL
      for (int kk = 0; kk < kNt / 2; ++kk) x.wgmma_fence_operand(pa[kk]);
      x.wgmma_fence_operand(acc);
      x.wgmma_fence();  // the accumulators were rescaled
      const uint32_t v_at = x.shared_addr(s.v(st)) + uint32_t(part * 4 * Bc * 128);
      GEMMAX_UNROLL
      for (int kk = 0; kk < kNt / 2; ++kk)  // V MN-major: 64-column blocks Bc * 128 bytes apart
        x.template wgmma_bf16_rs<256, true>(
            acc, pa[kk], wgmma_desc(v_at + uint32_t(kk) * 2048, Bc * 128, 1024, Swizzle::k128B),
            true);
      x.wgmma_commit();
      x.template wgmma_wait<0>();
      x.wgmma_fence_operand(acc);
      x.mbarrier_arrive(s.bar(3, st));  // ... and with the value tile
    }

    GEMMAX_UNROLL
    for (int e = 0; e < 2; ++e) {
      if (pos[e] >= S) continue;
      const int64_t h = rows.head(r_lo + 8 * e);
      bf16* orow = p.o + ((b * S + pos[e]) * d.H + h) * HD + part * 256;
      const float inv = lsum[e] > 0 ? 1.0f / lsum[e] : 0.0f;
      GEMMAX_UNROLL
      for (int nt = 0; nt < 32; ++nt) {
        const int col = nt * 8 + 2 * (l & 3);
        orow[col] = from_acc<bf16>(acc[4 * nt + 2 * e] * inv);
        orow[col + 1] = from_acc<bf16>(acc[4 * nt + 2 * e + 1] * inv);
      }
      if (part == 0 && (l & 3) == 0)
        p.lse[(b * d.H + h) * S + pos[e]] = (m[e] + klog2(lsum[e])) * kLn2;
    }
  }
};

}  // namespace gemmax::kern

// The attention backward's dq on Hopper's instructions (cuda_attention=sm90), head_dim 256 and
// 512; the machinery and the dk/dv kernel are in attention_sm90_bwd.h.
//
// One block per 64 query positions of one head, iterating the key tiles they may see (tiles
// wholly outside the window are never visited). Q and dO are loaded once; K and V tiles of R
// rows (64 at head_dim 256, 32 at 512) go through the ring.
//   warpgroup 0: S = Q K^T (m64nRk16 over head_dim, both K-major), P = exp(S - lse) masked, to
//                shared memory in fp32; then dQ's first half of columns += dS K (K MN-major);
//   warpgroup 1: dP = dO V^T, dS = P (dP - delta) to shared memory (bf16);
//                dQ's second half += dS K.
// Registers a consumer thread: hd / 4 accumulators of dQ + R / 2 of S or dP.
// Shared memory (bytes), head_dim 256 | 512: Q, dO 2 x 32768 | 2 x 65536; the ring's K and V
// 2 stages x 65536 | 1 x 65536; dS bf16 8192; P fp32 16384 | 8192; the stages' key segments;
// 9 mbarriers; up to 1024 to align: 222792 | 214216 of the 232448 (227 KiB) a block may have on
// H100/H200.
//
// Unlike the mma kernel, a block takes one head: the K and V tiles are read once per head of a
// kv group rather than once per group.
#pragma once

#include "gemmax/backend/cuda/kernels/attention_sm90_bwd.h"

namespace gemmax::kern {

template <class A>
struct AttnSm90DqSmem {
  static constexpr int R = A::kStream;
  char* base;
  GEMMAX_HD bf16* q() const { return reinterpret_cast<bf16*>(base); }
  GEMMAX_HD bf16* dout() const { return q() + A::tile_elems(64); }
  GEMMAX_HD bf16* k(int st) const {
    return dout() + A::tile_elems(64) + st * 2 * A::tile_elems(R);
  }
  GEMMAX_HD bf16* v(int st) const { return k(st) + A::tile_elems(R); }
  GEMMAX_HD bf16* ds() const { return k(A::kStages); }  // 64 queries x 64 keys (R used)
  GEMMAX_HD float* pf() const {  // [q][key], sm90_pf_pair
    return reinterpret_cast<float*>(ds() + 64 * 64);
  }
  GEMMAX_HD int32_t* seg(int st) const {
    return reinterpret_cast<int32_t*>(pf() + 64 * R) + st * R;
  }
  GEMMAX_HD AttnSm90Bars bars() const {
    return {reinterpret_cast<uint64_t*>(seg(A::kStages))};
  }
  static constexpr size_t bytes() {
    return A::kSwizzleAtom + (2 * size_t(A::tile_elems(64)) + 2 * A::kStages * A::tile_elems(R)) * 2 +
           64 * 64 * 2 + 64 * R * 4 + A::kStages * R * 4 + AttnSm90Bars::kCount * 8;
  }
};
static_assert(AttnSm90DqSmem<AttnSm90Bwd<256>>::bytes() <= 227 * 1024 &&
                  AttnSm90DqSmem<AttnSm90Bwd<512>>::bytes() <= 227 * 1024,
              "over Hopper's shared memory per block");

// Grid (query tiles of 64, H, B).
template <int HD>
struct AttentionDqSm90Kernel {
  using A = AttnSm90Bwd<HD>;
  static constexpr int R = A::kStream, kStages = A::kStages, kHalves = A::kDqHalves;
  static constexpr int kMaxThreads = A::kThreads;
  static constexpr bool kGridConstant = true;
  template <class X>
  GEMMAX_KFN void operator()(X& x, const AttnSm90BwdParams& p) const {
    const AttnDims& d = p.d;
    const int64_t b = x.bz(), h = x.by(), kvh = h / d.group(), q0 = int64_t(x.bx()) * A::kRows;
    const int64_t S = d.S;
    const AttnSm90DqSmem<A> s{sm90_aligned_smem(x)};
    const AttnSm90Bars bar = s.bars();
    bar.template init<kStages>(x, 128, 256);  // P: fp32 by warpgroup 1; dS: both wgmma
    const TileRange tiles = key_tiles(q0, kmin(S, q0 + A::kRows), d.window, R);
    const int64_t count = tiles.end - tiles.begin;

    if (x.tid() >= A::kConsumers) {
      sm90_produce<A>(
          x, bar, count,
          [&](uint64_t* once) {
            sm90_load_pair<A>(x, once, A::kRows, b, q0, h * HD, s.q(), p.q, s.dout(), p.dout);
          },
          [&](int lane, int64_t n) {  // the keys' segments
            Sm90LaneRows<int32_t, R> seg;
            const int64_t k0 = (tiles.begin + n) * R;
            GEMMAX_UNROLL
            for (int j = 0; j < R / 32; ++j) {
              const int64_t i = k0 + lane + 32 * j;
              seg.v[j] = i < S ? p.seg[b * S + i] : 0;
            }
            return seg;
          },
          [&](int lane, int64_t n, int st, const Sm90LaneRows<int32_t, R>& seg) {
            GEMMAX_UNROLL
            for (int j = 0; j < R / 32; ++j) s.seg(st)[lane + 32 * j] = seg.v[j];
            if (lane == 0)
              sm90_load_pair<A>(x, bar.full(st), R, b, (tiles.begin + n) * R, kvh * HD, s.k(st),
                                p.k, s.v(st), p.v);
          });
      return;
    }

    x.template setmaxnreg_inc<A::kConsumerRegs>();
    const int wg = x.tid() / 128, tig = x.tid() % 128;
    // This thread's two query rows: position, segment, lse (base 2), delta.
    const int r_lo = wgmma_acc_row(tig, 0);
    int64_t pos[2];
    int32_t seg_q[2];
    float lse2[2], dlt[2];
    GEMMAX_UNROLL
    for (int e = 0; e < 2; ++e) {
      pos[e] = q0 + r_lo + 8 * e;
      const bool in = pos[e] < S;
      const int64_t at = (b * d.H + h) * S + pos[e];
      seg_q[e] = in ? p.seg[b * S + pos[e]] : 0;
      lse2[e] = in ? p.lse[at] * kLog2e : 0.0f;
      dlt[e] = in ? p.delta[at] : 0.0f;
    }
    const WarpSpan span = warp_span(x, pos, seg_q, S);
    float acc[kHalves][64] = {};  // dQ's columns 128 (kHalves wg + j) + [0, 128)
    x.mbarrier_wait(bar.once(), 0);
    const uint32_t q_at = x.shared_addr(s.q()), do_at = x.shared_addr(s.dout());
    const uint32_t ds_at = x.shared_addr(s.ds());
    for (int64_t n = 0; n < count; ++n) {
      const int st = int(n % kStages);
      const int64_t k0 = (tiles.begin + n) * R;
      const uint32_t k_at = x.shared_addr(s.k(st)), v_at = x.shared_addr(s.v(st));
      x.mbarrier_wait(bar.full(st), sm90_stage_parity<kStages>(n));
      float sc[R / 2] = {};
      if (wg == 0) {
        sm90_head_product<A, R>(x, sc, q_at, k_at);  // S
        if (d.round_scores) sm90_round_scores(sc);
        if (n > 0) x.mbarrier_wait(bar.p_free(), sm90_parity(n - 1));
        // The mask on boundary tiles only (attention_tiles.h, interior tiles).
        const bool interior = interior_keys(x, span, k0, R, s.seg(st), S, d.window);
        GEMMAX_UNROLL
        for (int i = 0; i < R / 2; ++i) {
          const int c = wgmma_acc_col(tig, i), e = (i & 3) >> 1;
          const int64_t j = k0 + c;
          const bool vis = interior || (pos[e] < S && j < S && causal_visible(pos[e], j, d.window) &&
                                        s.seg(st)[c] == seg_q[e]);
          sc[i] = vis ? kexp2(sc[i] * kLog2e - lse2[e]) : 0.0f;  // P
        }
        GEMMAX_UNROLL
        for (int i = 0; i < R / 2; i += 2)
          sm90_pf_pair<R>(s.pf(), wgmma_acc_row(tig, i), wgmma_acc_col(tig, i)) = {sc[i], sc[i + 1]};
        x.mbarrier_arrive(bar.p_ready());
      } else {
        sm90_head_product<A, R>(x, sc, do_at, v_at);  // dP
        sm90_write_ds<R>(x, bar, n, tig, sc, s.pf(), s.ds(),
                         [&](int i, int) { return dlt[(i & 3) >> 1]; });
      }
      x.mbarrier_wait(bar.ds_ready(), sm90_parity(n));
      sm90_rows_product<kHalves, R>(x, acc, kHalves * wg, ds_at, k_at);  // dQ += dS K
      x.mbarrier_arrive(bar.ds_free());
      x.mbarrier_arrive(bar.empty(st));
    }

    sm90_store_acc(acc, tig, p.dq + (b * S * d.H + h) * HD + 128 * kHalves * wg, q0, S, d.H * HD);
  }
};

}  // namespace gemmax::kern

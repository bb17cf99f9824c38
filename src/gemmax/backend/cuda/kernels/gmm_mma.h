// Grouped matmuls on tensor cores (bfloat16 in, fp32 accumulate): 128 x 128 output tiles, eight
// warps of 64 x 32, the reduction in 64-deep slices through a three-stage cp.async pipeline.
// The three products differ only in how their operands are stored:
//   gmm      out[m, n]  = lhs[m, k] . W[n, k]^T   A [m][k],  B [n][k]
//   gmm_dlhs dlhs[m, k] = dout[m, n] . W[n, k]    A [m][n],  B [n][k] read transposed
//   gmm_drhs dW[n, k]  += dout[r, n]^T . lhs[r, k] over a group's rows r: A and B read transposed
// Rows are gathered and scattered through the row maps in the copies and the epilogue. The fast
// path needs every row length a multiple of 8 and 16-byte aligned operands (ops/gmm_fast_ops.h).
// The group table comes built (GroupTableKernel). Column tiles vary fastest in the grid (x), so
// the blocks resident at once share row tiles of A, which are then read from HBM about once.
#pragma once

#include "gemmax/backend/cuda/kernels/gmm_tiles.h"
#include "gemmax/backend/cuda/kernels/mma_tile.h"

namespace gemmax::kern {

// Two blocks per SM (98 KiB of shared memory and at most 128 registers a thread each).
struct GmmMma {
  static constexpr int kThreads = 256, BM = 128, BN = 128, BK = 64, kStages = 3;
  static constexpr int kWarpsN = 4, WM = 64, WN = 32, kMt = WM / 16, kNt = WN / 8;
  static constexpr int kTileElems = BM * BK;  // every operand tile of a stage (BM == BN)
  static constexpr size_t smem_bytes() { return size_t(kStages) * 2 * kTileElems * 2 + 2 * BM * 4; }
};

struct GmmMmaSmem {
  bf16* tiles;  // stage s: A at tiles + 2 s kTileElems, B after it
  int32_t* rows_a;
  int32_t* rows_b;
  template <class X>
  GEMMAX_KFN static GmmMmaSmem of(X& x) {
    bf16* t = x.template smem<bf16>();
    int32_t* r = reinterpret_cast<int32_t*>(t + GmmMma::kStages * 2 * GmmMma::kTileElems);
    return {t, r, r + GmmMma::BM};
  }
  GEMMAX_HD bf16* a(int stage) const { return tiles + 2 * stage * GmmMma::kTileElems; }
  GEMMAX_HD bf16* b(int stage) const { return a(stage) + GmmMma::kTileElems; }
};

// The pipelined main loop over `slices` reduction slices: load(stage, slice) issues the copies
// of both operand tiles of a slice; the warps accumulate into acc.
template <bool kATrans, bool kBTrans, class X, class Load>
GEMMAX_KFN void gmm_mma_mainloop(X& x, const GmmMmaSmem& s, int64_t slices, Load&& load,
                                 float (&acc)[GmmMma::kMt][GmmMma::kNt][4]) {
  using M = GmmMma;
  const int warp = x.tid() / kWarp, wm = warp / M::kWarpsN, wn = warp % M::kWarpsN;
  constexpr int a_cols = kATrans ? M::BM : M::BK, b_cols = kBTrans ? M::BN : M::BK;
  GEMMAX_UNROLL
  for (int st = 0; st < M::kStages - 1; ++st) {
    if (st < slices) load(st, int64_t(st));
    x.cp_async_commit();
  }
  for (int64_t kt = 0; kt < slices; ++kt) {
    x.template cp_async_wait<M::kStages - 2>();
    x.sync();
    const int64_t next = kt + M::kStages - 1;
    if (next < slices) load(int(next % M::kStages), next);
    x.cp_async_commit();
    const bf16* As = s.a(int(kt % M::kStages));
    const bf16* Bs = s.b(int(kt % M::kStages));
    GEMMAX_UNROLL
    for (int kk = 0; kk < M::BK; kk += 16) {
      uint32_t af[M::kMt][4], bf[M::kNt][2];
      GEMMAX_UNROLL
      for (int mt = 0; mt < M::kMt; ++mt)
        load_a_frag(x, As, a_cols, kATrans, wm * M::WM + mt * 16, kk, af[mt]);
      GEMMAX_UNROLL
      for (int nt = 0; nt < M::kNt; nt += 2)
        load_b_frags(x, Bs, b_cols, kBTrans, wn * M::WN + nt * 8, kk, bf[nt], bf[nt + 1]);
      GEMMAX_UNROLL
      for (int mt = 0; mt < M::kMt; ++mt) {
        GEMMAX_UNROLL
        for (int nt = 0; nt < M::kNt; ++nt) x.mma_bf16(acc[mt][nt], af[mt], bf[nt]);
      }
    }
  }
  x.template cp_async_wait<0>();
}

// Calls f(row, col, v0, v1) for each pair of adjacent accumulator columns of this thread, with
// row and col within the block tile.
template <class X, class F>
GEMMAX_KFN void gmm_mma_epilogue(X& x, float (&acc)[GmmMma::kMt][GmmMma::kNt][4], F&& f) {
  using M = GmmMma;
  const int warp = x.tid() / kWarp, wm = warp / M::kWarpsN, wn = warp % M::kWarpsN, l = x.lane();
  GEMMAX_UNROLL
  for (int mt = 0; mt < M::kMt; ++mt) {
    GEMMAX_UNROLL
    for (int nt = 0; nt < M::kNt; ++nt) {
      GEMMAX_UNROLL
      for (int i = 0; i < 4; i += 2)
        f(wm * M::WM + mt * 16 + acc_row(l, i), wn * M::WN + nt * 8 + acc_col(l, i), acc[mt][nt][i],
          acc[mt][nt][i + 1]);
    }
  }
}

// Both bfloat16 of a pair in one 32-bit access (the pair is 4-byte aligned: even columns, row
// lengths multiples of 8).
GEMMAX_HD void store_pair(bf16* p, float v0, float v1, bool accumulate) {
#ifdef __CUDA_ARCH__
  uint32_t* w = reinterpret_cast<uint32_t*>(p);
  const uint32_t old = accumulate ? *w : 0u;
#else
  uint32_t old = 0;
  if (accumulate) std::memcpy(&old, p, 4);
#endif
  if (accumulate) {
    v0 += unpack_lo(old);
    v1 += unpack_hi(old);
  }
  const uint32_t packed = pack_bf16(v0, v1);
#ifdef __CUDA_ARCH__
  *w = packed;
#else
  std::memcpy(static_cast<void*>(p), &packed, 4);
#endif
}
GEMMAX_HD void store_pair(float* p, float v0, float v1, bool accumulate) {
  p[0] = accumulate ? p[0] + v0 : v0;
  p[1] = accumulate ? p[1] + v1 : v1;
}

// Eight consecutive outputs in 16-byte accesses (bf16: one, fp32: two), added to what is there
// when accumulating, each rounded once. p is 16-byte aligned.
template <class T>
GEMMAX_HD void store_8(T* p, const float (&v)[8], bool accumulate) {
  Pack<T, 8> r = accumulate ? load_wide<8>(p) : Pack<T, 8>{};
  GEMMAX_UNROLL
  for (int e = 0; e < 8; ++e) r.v[e] = from_acc<T>(accumulate ? v[e] + to_acc(r.v[e]) : v[e]);
  store_wide<8>(p, r);
}

// Writes the block tile: the warps' accumulators go to shared memory as fp32 rows (over the
// operand tiles, free once every warp has left the main loop), then each thread writes eight
// consecutive columns of a row at a time with 16-byte stores instead of 32-bit pairs.
// out_row(r) is the output of the tile's row r at the tile's first column, or null (no row);
// columns at or past `cols` (a multiple of 8) are not written.
template <class X, class OutRow>
GEMMAX_KFN void gmm_mma_store(X& x, const GmmMmaSmem& s, float (&acc)[GmmMma::kMt][GmmMma::kNt][4],
                              OutRow&& out_row, int64_t cols, bool accumulate) {
  using M = GmmMma;
  // 8 floats of padding per row: the float2 writes of a half-warp (rows g, g + 1, .., columns
  // 2t) fall in distinct banks.
  constexpr int kStride = M::BN + 8, kChunks = M::BN / 8;
  static_assert(size_t(M::BM) * kStride * 4 <= size_t(M::kStages) * 2 * M::kTileElems * 2);
  float* stage = reinterpret_cast<float*>(s.tiles);
  x.sync();  // every warp is done with the operand tiles
  gmm_mma_epilogue(x, acc, [&](int r, int c, float v0, float v1) {
    store_pack<2>(stage + r * kStride + c, Pack<float, 2>{{v0, v1}});
  });
  x.sync();
  for (int e = x.tid(); e < M::BM * kChunks; e += x.nthreads()) {
    const int r = e / kChunks, c = e % kChunks * 8;
    auto* dst = out_row(r);
    if (dst == nullptr || c >= cols) continue;
    const Pack<float, 4> lo = load_pack<4>(stage + r * kStride + c),
                         hi = load_pack<4>(stage + r * kStride + c + 4);
    const float v[8] = {lo.v[0], lo.v[1], lo.v[2], lo.v[3], hi.v[0], hi.v[1], hi.v[2], hi.v[3]};
    store_8(dst + c, v, accumulate);
  }
}

// Gathers the block's mapped rows into shared memory: rows_a through map_a, rows_b through map_b
// (-1: no row).
template <class X>
GEMMAX_KFN void gmm_block_rows(X& x, const GmmMmaSmem& s, const GmmArgs& a, int64_t row0,
                               int64_t rows, const int32_t* map_a, int64_t limit_a,
                               const int32_t* map_b, int64_t limit_b) {
  for (int i = x.tid(); i < GmmMma::BM; i += x.nthreads()) {
    s.rows_a[i] = i < rows ? int32_t(mapped_row(x, map_a, row0 + i, limit_a, a)) : -1;
    s.rows_b[i] = i < rows ? int32_t(mapped_row(x, map_b, row0 + i, limit_b, a)) : -1;
  }
}

// out[out(r)] (+)= lhs[in(r)] . W_g[w0 : w0 + n]^T. Grid (column tiles of n, row tiles).
struct GmmForwardMmaKernel {
  static constexpr int kMaxThreads = GmmMma::kThreads, kMinBlocks = 2;
  template <class X>
  GEMMAX_KFN void operator()(X& x, bf16* out, const bf16* lhs, const bf16* w, GmmArgs a) const {
    using M = GmmMma;
    const GmmMmaSmem s = GmmMmaSmem::of(x);
    const GroupTiles gt = device_group_tiles(a);
    int64_t g, row0, rows;
    if (!gt.locate(x.by(), M::BM, &g, &row0, &rows)) return;
    gmm_block_rows(x, s, a, row0, rows, a.in_map, a.in_rows, a.out_map, a.out_rows);
    x.sync();
    const int64_t j0 = int64_t(x.bx()) * M::BN;
    const bf16* wg = w + (g * a.N + a.w0) * a.k;
    float acc[M::kMt][M::kNt][4] = {};
    gmm_mma_mainloop<false, false>(
        x, s, ceil_div(a.k, M::BK),
        [&](int st, int64_t kt) {
          const int64_t k0 = kt * M::BK;
          load_tile_async(
              x, s.a(st), M::BM, M::BK,
              [&](int r) -> const bf16* {
                return s.rows_a[r] >= 0 ? lhs + int64_t(s.rows_a[r]) * a.k : nullptr;
              },
              k0, a.k, lhs);
          load_tile_async(
              x, s.b(st), M::BN, M::BK,
              [&](int r) -> const bf16* { return j0 + r < a.n ? wg + (j0 + r) * a.k : nullptr; },
              k0, a.k, lhs);
        },
        acc);
    gmm_mma_store(
        x, s, acc,
        [&](int r) { return s.rows_b[r] >= 0 ? out + int64_t(s.rows_b[r]) * a.n + j0 : nullptr; },
        a.n - j0, a.accumulate);
  }
};

// dlhs[in(r)] (+)= dout[out(r)] . W_g[w0 : w0 + n]. Grid (column tiles of k, row tiles).
struct GmmDlhsMmaKernel {
  static constexpr int kMaxThreads = GmmMma::kThreads, kMinBlocks = 2;
  template <class X>
  GEMMAX_KFN void operator()(X& x, bf16* dlhs, const bf16* dout, const bf16* w, GmmArgs a) const {
    using M = GmmMma;
    const GmmMmaSmem s = GmmMmaSmem::of(x);
    const GroupTiles gt = device_group_tiles(a);
    int64_t g, row0, rows;
    if (!gt.locate(x.by(), M::BM, &g, &row0, &rows)) return;
    gmm_block_rows(x, s, a, row0, rows, a.out_map, a.out_rows, a.in_map, a.in_rows);
    x.sync();
    const int64_t c0 = int64_t(x.bx()) * M::BN;
    const bf16* wg = w + (g * a.N + a.w0) * a.k;
    float acc[M::kMt][M::kNt][4] = {};
    gmm_mma_mainloop<false, true>(
        x, s, ceil_div(a.n, M::BK),
        [&](int st, int64_t kt) {
          const int64_t j0 = kt * M::BK;
          load_tile_async(
              x, s.a(st), M::BM, M::BK,
              [&](int r) -> const bf16* {
                return s.rows_a[r] >= 0 ? dout + int64_t(s.rows_a[r]) * a.n : nullptr;
              },
              j0, a.n, dout);
          load_tile_async(
              x, s.b(st), M::BK, M::BN,
              [&](int r) -> const bf16* { return j0 + r < a.n ? wg + (j0 + r) * a.k : nullptr; },
              c0, a.k, dout);
        },
        acc);
    gmm_mma_store(
        x, s, acc,
        [&](int r) { return s.rows_b[r] >= 0 ? dlhs + int64_t(s.rows_b[r]) * a.k + c0 : nullptr; },
        a.k - c0, a.accumulate);
  }
};

// drhs[g][w0 + j] += sum over the group's rows r of dout[out(r), j] lhs[in(r)]. Grid (column
// tiles of k, tiles of n, G); a group without rows leaves its weights untouched.
struct GmmDrhsMmaKernel {
  static constexpr int kMaxThreads = GmmMma::kThreads, kMinBlocks = 2;
  template <class X, class TC>
  GEMMAX_KFN void operator()(X& x, TC* drhs, const bf16* lhs, const bf16* dout, GmmArgs a) const {
    using M = GmmMma;
    const GmmMmaSmem s = GmmMmaSmem::of(x);
    const GroupTiles gt = device_group_tiles(a);
    const int64_t g = x.bz();
    const int64_t r0 = gt.first_row[g], r1 = kmin<int64_t>(gt.first_row[g + 1], a.m);
    if (r1 <= r0) return;
    const int64_t c0 = int64_t(x.bx()) * M::BN, j0 = int64_t(x.by()) * M::BM;
    float acc[M::kMt][M::kNt][4] = {};
    gmm_mma_mainloop<true, true>(
        x, s, ceil_div(r1 - r0, M::BK),
        [&](int st, int64_t kt) {
          const int64_t rb = r0 + kt * M::BK;
          load_tile_async(
              x, s.a(st), M::BK, M::BM,
              [&](int r) -> const bf16* {
                if (rb + r >= r1) return nullptr;
                const int64_t row = mapped_row(x, a.out_map, rb + r, a.out_rows, a);
                return row >= 0 ? dout + row * a.n : nullptr;
              },
              j0, a.n, dout);
          load_tile_async(
              x, s.b(st), M::BK, M::BN,
              [&](int r) -> const bf16* {
                if (rb + r >= r1) return nullptr;
                const int64_t row = mapped_row(x, a.in_map, rb + r, a.in_rows, a);
                return row >= 0 ? lhs + row * a.k : nullptr;
              },
              c0, a.k, lhs);
        },
        acc);
    gmm_mma_store(
        x, s, acc,
        [&](int r) { return j0 + r < a.n ? drhs + (g * a.N + a.w0 + j0 + r) * a.k + c0 : nullptr; },
        a.k - c0, true);
  }
};

}  // namespace gemmax::kern

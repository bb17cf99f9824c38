// The grouped matmul's forward on Hopper's instructions (cuda_gmm=sm90): out[out(r)] (+)=
// lhs[in(r)] . W_g[w0 : w0 + n]^T, the contract of GmmForwardMmaKernel (gmm_mma.h), which it is
// tested against.
//
// One warpgroup (128 threads) computes a 64 x 128 output tile with wgmma.m64n128k16, both
// operands in shared memory in the 128-byte-swizzled K-major layout (64 bfloat16 per 128-byte
// row, 8-row atoms of 1024 bytes). The reduction goes in 64-deep slices through a four-stage
// pipeline:
//   - the weight tile (128 rows of one group's window, consecutive in memory) comes by TMA from
//     a tensor map over all G * N weight rows, completing on the stage's mbarrier; rows and
//     columns past the tensor read as zeros, columns past the window are dropped at the store;
//   - the activation rows go through the row map, so they are not a box of a tensor: TMA's
//     tiled mode cannot gather them (Hopper has no TMA gather), so each thread copies 16-byte
//     chunks with cp.async into the same swizzled layout, and the copies are made visible to
//     wgmma (the async proxy) by wait_group, fence.proxy.async and the block barrier.
// Group sizes and offsets are read on the device (the group table of GroupTableKernel, in tiles
// of 64 rows); the grid covers the most row tiles any split can have.
#pragma once

#include "gemmax/backend/cuda/kernels/gmm_mma.h"
#include "gemmax/backend/cuda/kernels/sm90_types.h"

namespace gemmax::kern {

struct GmmSm90 {
  static constexpr int kThreads = 128, BM = 64, BN = 128, BK = 64, kStages = 4;
  static constexpr uint32_t kABytes = BM * BK * 2, kBBytes = BN * BK * 2;
  static constexpr uint32_t kSwizzleAtom = kSm90SwizzleAtom;
  static constexpr size_t smem_bytes() {
    return kSwizzleAtom + size_t(kStages) * (kABytes + kBBytes) + kStages * 8 + 2 * BM * 4;
  }
};

// The kernel's arguments, kept in parameter space on the GPU (the TMA copy names the map there).
struct GmmSm90Params {
  bf16* out;
  const bf16* lhs;
  TensorMap2d weights;  // [G * N rows, k], box 128 rows x 64 columns, 128-byte swizzle
  GmmArgs a;            // with the group table in tiles of GmmSm90::BM rows
};

// Shared memory from a 1024-byte-aligned start: the A tiles of every stage, the B tiles, one
// mbarrier per stage, then the block's mapped input and output rows.
struct GmmSm90Smem {
  char* base;
  template <class X>
  GEMMAX_KFN static GmmSm90Smem of(X& x) {
    return {sm90_aligned_smem(x)};
  }
  GEMMAX_HD bf16* a(int stage) const {
    return reinterpret_cast<bf16*>(base + stage * GmmSm90::kABytes);
  }
  GEMMAX_HD bf16* b(int stage) const {
    return reinterpret_cast<bf16*>(base + GmmSm90::kStages * GmmSm90::kABytes +
                                    stage * GmmSm90::kBBytes);
  }
  GEMMAX_HD uint64_t* full(int stage) const {
    return reinterpret_cast<uint64_t*>(base +
                                       GmmSm90::kStages * (GmmSm90::kABytes + GmmSm90::kBBytes)) +
           stage;
  }
  GEMMAX_HD int32_t* rows_in() const { return reinterpret_cast<int32_t*>(full(GmmSm90::kStages)); }
  GEMMAX_HD int32_t* rows_out() const { return rows_in() + GmmSm90::BM; }
};

// The elements of a 64-wide MN-major block (one 128-byte row per reduction index).
inline constexpr int kSm90BlockElems = GmmSm90::BK * 64;

// The stages' barriers, initialised by one thread and made visible to the block and to TMA.
template <class X>
GEMMAX_KFN void sm90_init_barriers(X& x, const GmmSm90Smem& s) {
  if (x.tid() == 0) {
    for (int st = 0; st < GmmSm90::kStages; ++st) x.mbarrier_init(s.full(st), 1);
    x.fence_proxy_async();  // the barriers as the TMA unit (async proxy) sees them
  }
  x.sync();
}

// The prologue of the kernels over row tiles (forward, dlhs): the block's group *g and first
// row *row0 (false past the last tile: nothing to do), its row tables (rows_in() the rows read
// through `read_map`, rows_out() the rows written through `write_map`, -1 past the tile's rows)
// and the barriers.
template <class X>
GEMMAX_KFN bool sm90_row_tile(X& x, const GmmSm90Smem& s, const GmmArgs& a, const int32_t* read_map,
                              int64_t read_rows, const int32_t* write_map, int64_t write_rows,
                              int64_t* g, int64_t* row0) {
  int64_t rows;
  if (!device_group_tiles(a).locate(x.by(), GmmSm90::BM, g, row0, &rows)) return false;
  for (int i = x.tid(); i < GmmSm90::BM; i += x.nthreads()) {
    s.rows_in()[i] = i < rows ? int32_t(mapped_row(x, read_map, *row0 + i, read_rows, a)) : -1;
    s.rows_out()[i] = i < rows ? int32_t(mapped_row(x, write_map, *row0 + i, write_rows, a)) : -1;
  }
  sm90_init_barriers(x, s);
  return true;
}

// Stage st's A tile by cp.async: the row tile's rows of `src` (`cols` columns a row) through
// rows_in(), columns [c0, c0 + BK); rows of -1 and columns past `cols` read as zeros.
template <class X>
GEMMAX_KFN void sm90_gather_rows(X& x, const GmmSm90Smem& s, int st, const bf16* src, int64_t cols,
                                 int64_t c0) {
  using M = GmmSm90;
  for (int e = x.tid(); e < M::BM * (M::BK / 8); e += x.nthreads()) {
    const int r = e / (M::BK / 8), c = e % (M::BK / 8);
    const int32_t row = s.rows_in()[r];
    const bool valid = row >= 0 && c0 + c * 8 < cols;
    x.cp_async16(s.a(st) + swizzled(r, c * 8, M::BK),
                 valid ? src + int64_t(row) * cols + c0 + c * 8 : src, valid);
  }
}

// The pipelined loop over `slices` reduction slices. load(stage, slice) issues a slice's copies:
// thread 0 arrives on the stage's barrier (expecting the bytes of its TMA boxes, possibly none)
// and every thread's cp.async chunks are committed here. Once slice kt is in, fix(stage, slice)
// may rewrite it (it returns whether it wrote; the same on every thread), then four wgmma
// accumulate it. Each operand is K-major (its transpose bit false: 64 reduction elements per
// swizzled 128-byte row) or MN-major (true: 64-wide blocks of one 128-byte row per reduction
// index, kSm90BlockElems apart).
template <bool kTransA, bool kTransB, class X, class Load, class Fix>
GEMMAX_KFN void gmm_sm90_mainloop(X& x, const GmmSm90Smem& s, int64_t slices, Load&& load,
                                  Fix&& fix, float (&acc)[GmmSm90::BN / 2]) {
  using M = GmmSm90;
  auto desc = [](uint32_t at, int kk, bool mn_major) {
    return mn_major ? wgmma_desc(at + kk * 128, kSm90BlockElems * 2, 1024, Swizzle::k128B)
                    : wgmma_desc(at + kk * 2, 16, 1024, Swizzle::k128B);
  };
  GEMMAX_UNROLL
  for (int st = 0; st < M::kStages - 1; ++st) {
    if (st < slices) load(st, int64_t(st));
    x.cp_async_commit();
  }
  for (int64_t kt = 0; kt < slices; ++kt) {
    const int st = int(kt % M::kStages);
    x.template cp_async_wait<M::kStages - 2>();  // this thread's chunks of slice kt
    x.fence_proxy_async();                       // ... visible to wgmma
    x.sync();                                    // everyone's, and stage kt - 1 is free
    x.mbarrier_wait(s.full(st), uint32_t((kt / M::kStages) & 1));  // the TMA boxes
    if (fix(st, kt)) {
      x.fence_proxy_async();  // the generic writes before wgmma's (async proxy) reads
      x.sync();
    }
    x.wgmma_fence();
    const uint32_t a_at = x.shared_addr(s.a(st)), b_at = x.shared_addr(s.b(st));
    GEMMAX_UNROLL
    for (int kk = 0; kk < M::BK; kk += 16)
      x.template wgmma_bf16<M::BN, kTransA, kTransB>(acc, desc(a_at, kk, kTransA),
                                                     desc(b_at, kk, kTransB), kt > 0 || kk > 0);
    x.wgmma_commit();
    x.template wgmma_wait<0>();
    const int64_t next = kt + M::kStages - 1;  // into the stage slice kt - 1 used
    if (next < slices) load(int(next % M::kStages), next);
    x.cp_async_commit();
  }
  x.template cp_async_wait<0>();
}

// The tile's rows into out[rows_out(r)][c0 + c] for columns c0 + c < n.
template <class X>
GEMMAX_KFN void sm90_store_rows(X& x, const GmmSm90Smem& s, bf16* out, int64_t n, int64_t c0,
                                const float (&acc)[GmmSm90::BN / 2], bool accumulate) {
  GEMMAX_UNROLL
  for (int i = 0; i < GmmSm90::BN / 2; i += 2) {
    const int r = wgmma_acc_row(x.tid(), i), c = wgmma_acc_col(x.tid(), i);
    const int32_t ro = s.rows_out()[r];
    if (ro >= 0 && c0 + c < n)
      store_pair(out + int64_t(ro) * n + c0 + c, acc[i], acc[i + 1], accumulate);
  }
}

struct GmmForwardSm90Kernel {
  static constexpr int kMaxThreads = GmmSm90::kThreads;
  static constexpr bool kGridConstant = true;
  template <class X>
  GEMMAX_KFN void operator()(X& x, const GmmSm90Params& p) const {
    using M = GmmSm90;
    const GmmArgs& a = p.a;
    const GmmSm90Smem s = GmmSm90Smem::of(x);
    int64_t g, row0;
    if (!sm90_row_tile(x, s, a, a.in_map, a.in_rows, a.out_map, a.out_rows, &g, &row0)) return;

    const int64_t j0 = int64_t(x.bx()) * M::BN;
    const int32_t weight_row = int32_t(g * a.N + a.w0 + j0);
    auto load = [&](int st, int64_t kt) {
      const int64_t k0 = kt * M::BK;
      if (x.tid() == 0) {
        x.mbarrier_arrive_expect_tx(s.full(st), M::kBBytes);
        x.tma_load_2d(s.b(st), p.weights, int32_t(k0), weight_row, s.full(st));
      }
      sm90_gather_rows(x, s, st, p.lhs, a.k, k0);
    };
    // Nothing to fix: columns past k read as zeros (TMA, cp.async's zero fill), and weight rows
    // past the window are dropped at the store.
    auto fix = [](int, int64_t) { return false; };
    float acc[M::BN / 2] = {};
    gmm_sm90_mainloop<false, false>(x, s, ceil_div(a.k, M::BK), load, fix, acc);
    sm90_store_rows(x, s, p.out, a.n, j0, acc, a.accumulate);
  }
};

}  // namespace gemmax::kern

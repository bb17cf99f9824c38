// The grouped matmul's backward on Hopper's instructions (cuda_gmm=sm90), with the contracts of
// GmmDlhsMmaKernel and GmmDrhsMmaKernel (gmm_mma.h), which they are tested against:
//   gmm_dlhs  dlhs[in(r)] (+)= dout[out(r)] . W_g[w0 : w0 + n]: A is the dout rows, K-major (the
//             reduction, n, runs along them); B is the weight window, whose rows are the
//             reduction and whose columns (k) are the output's, so it is read N-major through
//             wgmma's transpose bit (imm-trans-b), in place;
//   gmm_drhs  dW_g[w0 + j] += sum over the group's rows r of dout[out(r), j] lhs[in(r)]: the
//             reduction runs over the rows, so both operands are MN-major (imm-trans-a and -b).
// The machinery is the forward's (gmm_sm90.h): one warpgroup per 64 x 128 output tile,
// wgmma.m64n128k16, the reduction in 64-deep slices through four stages, the 128-byte swizzle,
// the same shared memory. An MN-major tile is 128-byte rows of 64 M or N elements, one row per
// reduction index, 8 of them a 1024-byte atom (the descriptor's stride byte offset); B's two
// 64-wide blocks are 8 KiB apart (its leading byte offset); a k16 step moves the start 16 rows,
// 2048 bytes, whole atoms.
//
// Loads: TMA where the operand is a box of a 2-D tensor (the weights always; dout and lhs when
// their row map is the identity), cp.async where a row map gathers (every thread copies 16-byte
// chunks into the same swizzled layout, as the forward's activations). A box does not stop where
// the reduction does: the last slice of a weight window, or of a group's rows, takes rows of the
// other half or the next group. Those rows are zeroed in shared memory after the box lands (the
// cp.async copies fill zeros themselves), so nothing but the reduction's own terms, in order,
// enters a sum.
#pragma once

#include "gemmax/backend/cuda/kernels/gmm_sm90.h"

namespace gemmax::kern {

// Zeroes reduction rows [from, BK) of `blocks` MN-major blocks of a stage: whole 128-byte rows,
// so the swizzle does not matter.
template <class X>
GEMMAX_KFN void sm90_zero_tail(X& x, bf16* tile, int blocks, int from) {
  const int per_block = (GmmSm90::BK - from) * 64;
  for (int e = x.tid(); e < blocks * per_block; e += x.nthreads())
    tile[e / per_block * kSm90BlockElems + from * 64 + e % per_block] = bf16::from_bits(0);
}

struct GmmDlhsSm90Params {
  bf16* dlhs;
  const bf16* dout;
  TensorMap2d weights;  // [G * N rows, k], box 64 columns x 64 rows, 128-byte swizzle
  TensorMap2d douts;    // [dout rows, n], box 64 x 64: read when there is no out map
  GmmArgs a;            // with the group table in tiles of GmmSm90::BM rows
};

// dlhs[in(r)] (+)= dout[out(r)] . W_g[w0 : w0 + n]. Grid (column tiles of k, row tiles).
struct GmmDlhsSm90Kernel {
  static constexpr int kMaxThreads = GmmSm90::kThreads;
  static constexpr bool kGridConstant = true;
  template <class X>
  GEMMAX_KFN void operator()(X& x, const GmmDlhsSm90Params& p) const {
    using M = GmmSm90;
    const GmmArgs& a = p.a;
    const GmmSm90Smem s = GmmSm90Smem::of(x);
    int64_t g, row0;
    // The dout rows read, the dlhs rows written.
    if (!sm90_row_tile(x, s, a, a.out_map, a.out_rows, a.in_map, a.in_rows, &g, &row0)) return;

    const bool dout_box = !a.out_map;  // rows row0 .. row0 + 63 of dout: the rows of other
                                       // groups in the box are never stored
    const int64_t c0 = int64_t(x.bx()) * M::BN;
    const int32_t weight_row = int32_t(g * a.N + a.w0);
    auto load = [&](int st, int64_t kt) {
      const int32_t j0 = int32_t(kt * M::BK);
      if (x.tid() == 0) {
        x.mbarrier_arrive_expect_tx(s.full(st), M::kBBytes + (dout_box ? M::kABytes : 0));
        for (int h = 0; h < 2; ++h)
          x.tma_load_2d(s.b(st) + h * kSm90BlockElems, p.weights, int32_t(c0 + 64 * h),
                        weight_row + j0, s.full(st));
        if (dout_box) x.tma_load_2d(s.a(st), p.douts, j0, int32_t(row0), s.full(st));
      }
      if (!dout_box) sm90_gather_rows(x, s, st, p.dout, a.n, j0);
    };
    // The weight rows past the window in the last slice (the other half, the next group).
    auto fix = [&](int st, int64_t kt) {
      const int64_t valid = a.n - kt * M::BK;
      if (valid >= M::BK) return false;
      sm90_zero_tail(x, s.b(st), 2, int(valid));
      return true;
    };
    float acc[M::BN / 2] = {};
    gmm_sm90_mainloop<false, true>(x, s, ceil_div(a.n, M::BK), load, fix, acc);
    sm90_store_rows(x, s, p.dlhs, a.k, c0, acc, a.accumulate);
  }
};

template <class TC>
struct GmmDrhsSm90Params {
  TC* drhs;  // bfloat16 or float32
  const bf16* lhs;
  const bf16* dout;
  TensorMap2d lhss;   // [lhs rows, k], box 64 x 64: read when there is no in map
  TensorMap2d douts;  // [dout rows, n], box 64 x 64: read when there is no out map
  GmmArgs a;          // with the group table (its rows; the tiles are not used)
};

// drhs[g][w0 + j] += sum over the group's rows r of dout[out(r), j] lhs[in(r)]. Grid (column
// tiles of k, tiles of 64 of n, G); a group without rows leaves its weights untouched.
struct GmmDrhsSm90Kernel {
  static constexpr int kMaxThreads = GmmSm90::kThreads;
  static constexpr bool kGridConstant = true;
  template <class X, class TC>
  GEMMAX_KFN void operator()(X& x, const GmmDrhsSm90Params<TC>& p) const {
    using M = GmmSm90;
    const GmmArgs& a = p.a;
    const GroupTiles gt = device_group_tiles(a);
    const int64_t g = x.bz();
    const int64_t r0 = gt.first_row[g], r1 = kmin<int64_t>(gt.first_row[g + 1], a.m);
    if (r1 <= r0) return;
    const GmmSm90Smem s = GmmSm90Smem::of(x);
    sm90_init_barriers(x, s);

    const bool dout_box = !a.out_map, lhs_box = !a.in_map;
    const int64_t c0 = int64_t(x.bx()) * M::BN, j0 = int64_t(x.by()) * M::BM;
    auto load = [&](int st, int64_t kt) {
      const int64_t rb = r0 + kt * M::BK;
      if (x.tid() == 0) {
        x.mbarrier_arrive_expect_tx(
            s.full(st), (dout_box ? M::kABytes : 0) + (lhs_box ? M::kBBytes : 0));
        if (dout_box) x.tma_load_2d(s.a(st), p.douts, int32_t(j0), int32_t(rb), s.full(st));
        if (lhs_box)
          for (int h = 0; h < 2; ++h)
            x.tma_load_2d(s.b(st) + h * kSm90BlockElems, p.lhss, int32_t(c0 + 64 * h),
                          int32_t(rb), s.full(st));
      }
      // Chunk e: reduction row e / 24, then 8 chunks of dout's 64 columns and 16 of lhs's 128.
      if (!dout_box || !lhs_box)
        for (int e = x.tid(); e < M::BK * 24; e += x.nthreads()) {
          const int r = e / 24, c = e % 24;
          const bool in_group = rb + r < r1;
          if (c < 8 && !dout_box) {
            const int64_t row = in_group ? mapped_row(x, a.out_map, rb + r, a.out_rows, a) : -1;
            const bool valid = row >= 0 && j0 + c * 8 < a.n;
            x.cp_async16(s.a(st) + swizzled(r, c * 8, 64),
                         valid ? p.dout + row * a.n + j0 + c * 8 : p.dout, valid);
          } else if (c >= 8 && !lhs_box) {
            const int h = (c - 8) / 8, cc = (c - 8) % 8;
            const int64_t col = c0 + 64 * h + cc * 8;
            const int64_t row = in_group ? mapped_row(x, a.in_map, rb + r, a.in_rows, a) : -1;
            const bool valid = row >= 0 && col < a.k;
            x.cp_async16(s.b(st) + h * kSm90BlockElems + swizzled(r, cc * 8, 64),
                         valid ? p.lhs + row * a.k + col : p.lhs, valid);
          }
        }
    };
    // The rows past the group in its last slice, where a box brought them.
    auto fix = [&](int st, int64_t kt) {
      const int64_t valid = r1 - (r0 + kt * M::BK);
      if (valid >= M::BK || !(dout_box || lhs_box)) return false;
      if (dout_box) sm90_zero_tail(x, s.a(st), 1, int(valid));
      if (lhs_box) sm90_zero_tail(x, s.b(st), 2, int(valid));
      return true;
    };
    float acc[M::BN / 2] = {};
    gmm_sm90_mainloop<true, true>(x, s, ceil_div(r1 - r0, M::BK), load, fix, acc);

    GEMMAX_UNROLL
    for (int i = 0; i < M::BN / 2; i += 2) {
      const int r = wgmma_acc_row(x.tid(), i), c = wgmma_acc_col(x.tid(), i);
      if (j0 + r < a.n && c0 + c < a.k)
        store_pair(p.drhs + (g * a.N + a.w0 + j0 + r) * a.k + c0 + c, acc[i], acc[i + 1], true);
    }
  }
};

}  // namespace gemmax::kern

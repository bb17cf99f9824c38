// Grouped matmuls on CUDA cores (fp32 arithmetic): the plain path. 64 x 64 output tiles, 16-deep
// slices of the reduction staged in shared memory as floats, 4 x 4 outputs per thread.
#pragma once

#include "gemmax/backend/cuda/kernels/gmm_tiles.h"

namespace gemmax::kern {

struct GmmSimple {
  static constexpr int kThreads = 256, kTile = 64, kDepth = 16;
  static constexpr size_t smem_bytes(int64_t G) {
    return GroupTiles::smem_ints(G) * 4 + 2 * kTile * 4 + 2 * kDepth * kTile * 4;
  }
};

// The block's staging buffers after the group table: mapped rows and the two operand slices
// (As[depth][rows], Bs[depth][cols]).
struct GmmSimpleSmem {
  int32_t *rows_a, *rows_b;
  float *As, *Bs;
  template <class X>
  GEMMAX_KFN static GmmSimpleSmem of(X& x, int64_t G) {
    int32_t* p = x.template smem<int32_t>() + GroupTiles::smem_ints(G);
    float* f = reinterpret_cast<float*>(p + 2 * GmmSimple::kTile);
    return {p, p + GmmSimple::kTile, f, f + GmmSimple::kDepth * GmmSimple::kTile};
  }
};

// acc[i][j] += sum_kk As[kk][ty*4+i] * Bs[kk][tx*4+j]
template <class X>
GEMMAX_KFN void simple_microtile(X& x, const GmmSimpleSmem& s, float (&acc)[4][4]) {
  const int tx = x.tid() % 16, ty = x.tid() / 16;
  for (int kk = 0; kk < GmmSimple::kDepth; ++kk) {
    float a[4], b[4];
    for (int i = 0; i < 4; ++i) a[i] = s.As[kk * GmmSimple::kTile + ty * 4 + i];
    for (int j = 0; j < 4; ++j) b[j] = s.Bs[kk * GmmSimple::kTile + tx * 4 + j];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
  }
}

// out[out(r)] (+)= lhs[in(r)] . W_g[w0 : w0 + n]^T. Grid (row tiles, column tiles of n).
struct GmmForwardSimpleKernel {
  static constexpr int kMaxThreads = GmmSimple::kThreads;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* out, const E* lhs, const E* w, GmmArgs a) const {
    constexpr int BM = GmmSimple::kTile, BK = GmmSimple::kDepth;
    const GroupTiles gt = group_tiles(x, a, x.template smem<int32_t>(), BM);
    int64_t g, row0, rows;
    if (!gt.locate(x.bx(), BM, &g, &row0, &rows)) return;
    const GmmSimpleSmem s = GmmSimpleSmem::of(x, a.G);
    if (x.tid() < BM) {
      const int64_t r = row0 + x.tid();
      s.rows_a[x.tid()] = x.tid() < rows ? int32_t(mapped_row(x, a.in_map, r, a.in_rows, a)) : -1;
      s.rows_b[x.tid()] = x.tid() < rows ? int32_t(mapped_row(x, a.out_map, r, a.out_rows, a)) : -1;
    }
    const int64_t j0 = int64_t(x.by()) * BM;
    const E* wg = w + (g * a.N + a.w0) * a.k;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < a.k; k0 += BK) {
      x.sync();
      for (int e = x.tid(); e < BK * BM; e += x.nthreads()) {
        const int mm = e / BK, kk = e % BK;
        const int32_t ra = s.rows_a[mm];
        const int64_t kc = k0 + kk, j = j0 + mm;
        s.As[kk * BM + mm] = ra >= 0 && kc < a.k ? to_acc(lhs[int64_t(ra) * a.k + kc]) : 0.0f;
        s.Bs[kk * BM + mm] = j < a.n && kc < a.k ? to_acc(wg[j * a.k + kc]) : 0.0f;
      }
      x.sync();
      simple_microtile(x, s, acc);
    }
    const int tx = x.tid() % 16, ty = x.tid() / 16;
    for (int i = 0; i < 4; ++i) {
      const int32_t ro = s.rows_b[ty * 4 + i];
      if (ro < 0) continue;
      for (int j = 0; j < 4; ++j) {
        const int64_t col = j0 + tx * 4 + j;
        if (col >= a.n) continue;
        E* o = out + int64_t(ro) * a.n + col;
        *o = from_acc<E>(a.accumulate ? to_acc(*o) + acc[i][j] : acc[i][j]);
      }
    }
  }
};

// dlhs[in(r)] (+)= dout[out(r)] . W_g[w0 : w0 + n]. Grid (row tiles, column tiles of k).
struct GmmDlhsSimpleKernel {
  static constexpr int kMaxThreads = GmmSimple::kThreads;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* dlhs, const E* dout, const E* w, GmmArgs a) const {
    constexpr int BM = GmmSimple::kTile, BK = GmmSimple::kDepth;
    const GroupTiles gt = group_tiles(x, a, x.template smem<int32_t>(), BM);
    int64_t g, row0, rows;
    if (!gt.locate(x.bx(), BM, &g, &row0, &rows)) return;
    const GmmSimpleSmem s = GmmSimpleSmem::of(x, a.G);
    if (x.tid() < BM) {
      const int64_t r = row0 + x.tid();
      s.rows_a[x.tid()] = x.tid() < rows ? int32_t(mapped_row(x, a.out_map, r, a.out_rows, a)) : -1;
      s.rows_b[x.tid()] = x.tid() < rows ? int32_t(mapped_row(x, a.in_map, r, a.in_rows, a)) : -1;
    }
    const int64_t c0 = int64_t(x.by()) * BM;
    const E* wg = w + (g * a.N + a.w0) * a.k;
    float acc[4][4] = {};
    for (int64_t j0 = 0; j0 < a.n; j0 += BK) {
      x.sync();
      for (int e = x.tid(); e < BK * BM; e += x.nthreads()) {
        const int mm = e / BK, jj = e % BK;  // As: rows x depth
        const int32_t ra = s.rows_a[mm];
        s.As[jj * BM + mm] =
            ra >= 0 && j0 + jj < a.n ? to_acc(dout[int64_t(ra) * a.n + j0 + jj]) : 0.0f;
        const int cc = e % BM, jb = e / BM;  // Bs: depth x columns, columns contiguous in W
        s.Bs[jb * BM + cc] =
            j0 + jb < a.n && c0 + cc < a.k ? to_acc(wg[(j0 + jb) * a.k + c0 + cc]) : 0.0f;
      }
      x.sync();
      simple_microtile(x, s, acc);
    }
    const int tx = x.tid() % 16, ty = x.tid() / 16;
    for (int i = 0; i < 4; ++i) {
      const int32_t ro = s.rows_b[ty * 4 + i];
      if (ro < 0) continue;
      for (int j = 0; j < 4; ++j) {
        const int64_t col = c0 + tx * 4 + j;
        if (col >= a.k) continue;
        E* o = dlhs + int64_t(ro) * a.k + col;
        *o = from_acc<E>(a.accumulate ? to_acc(*o) + acc[i][j] : acc[i][j]);
      }
    }
  }
};

// drhs[g][w0 + j] += sum over the group's rows of dout[out(r), j] lhs[in(r)]. Grid (column tiles
// of k, tiles of n, G); a group with no rows leaves its block untouched.
struct GmmDrhsSimpleKernel {
  static constexpr int kMaxThreads = GmmSimple::kThreads;
  template <class X, class TC, class E>
  GEMMAX_KFN void operator()(X& x, TC* drhs, const E* lhs, const E* dout, GmmArgs a) const {
    constexpr int BM = GmmSimple::kTile, BK = GmmSimple::kDepth;
    const GroupTiles gt = group_tiles(x, a, x.template smem<int32_t>(), BM);
    const int64_t g = x.bz();
    const int64_t r0 = gt.first_row[g], r1 = kmin<int64_t>(gt.first_row[g + 1], a.m);
    if (r1 <= r0) return;
    const GmmSimpleSmem s = GmmSimpleSmem::of(x, a.G);
    const int64_t c0 = int64_t(x.bx()) * BM, j0 = int64_t(x.by()) * BM;
    float acc[4][4] = {};
    for (int64_t rb = r0; rb < r1; rb += BK) {
      x.sync();
      if (x.tid() < BK) {
        const int64_t r = rb + x.tid();
        s.rows_a[x.tid()] = r < r1 ? int32_t(mapped_row(x, a.out_map, r, a.out_rows, a)) : -1;
        s.rows_b[x.tid()] = r < r1 ? int32_t(mapped_row(x, a.in_map, r, a.in_rows, a)) : -1;
      }
      x.sync();
      for (int e = x.tid(); e < BK * BM; e += x.nthreads()) {
        const int rr = e / BM, cc = e % BM;
        const int32_t ra = s.rows_a[rr], rb_ = s.rows_b[rr];
        s.As[rr * BM + cc] =
            ra >= 0 && j0 + cc < a.n ? to_acc(dout[int64_t(ra) * a.n + j0 + cc]) : 0.0f;
        s.Bs[rr * BM + cc] =
            rb_ >= 0 && c0 + cc < a.k ? to_acc(lhs[int64_t(rb_) * a.k + c0 + cc]) : 0.0f;
      }
      x.sync();
      simple_microtile(x, s, acc);
    }
    const int tx = x.tid() % 16, ty = x.tid() / 16;
    for (int i = 0; i < 4; ++i) {
      const int64_t j = j0 + ty * 4 + i;
      if (j >= a.n) continue;
      for (int jj = 0; jj < 4; ++jj) {
        const int64_t c = c0 + tx * 4 + jj;
        if (c >= a.k) continue;
        TC* o = drhs + (g * a.N + a.w0 + j) * a.k + c;
        *o = from_double<TC>(double(to_acc(*o)) + double(acc[i][jj]));
      }
    }
  }
};

}  // namespace gemmax::kern

// Tensor-core building blocks (mma.sync.m16n8k16, bf16 in, fp32 accumulate) shared by the
// grouped matmuls and attention: swizzled shared-memory tiles, fragment loads through ldmatrix
// for operands stored either way round, and the accumulator's element coordinates.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16): with g = lane / 4 and t = lane % 4,
//   A (16 x 16): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B (16 x 8):  b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8.., n g)
//   C (16 x 8):  c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
#pragma once

#include "gemmax/backend/cuda/kernels/kernel_base.h"

namespace gemmax::kern {

// A shared-memory tile of `cols` bf16 per row (a multiple of 64): the 16-byte chunks of row r
// are stored in the order chunk ^ (r % 8), so the eight rows an ldmatrix reads at one logical
// column hit eight different bank groups.
GEMMAX_HD int swizzled(int row, int col, int cols) {
  return row * cols + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// The A fragment of the 16 x 16 block at (m0, k0) of a tile stored [m][k] (k contiguous), or,
// with trans, [k][m] (m contiguous).
template <class X>
GEMMAX_KFN void load_a_frag(X& x, const bf16* tile, int cols, bool trans, int m0, int k0,
                            uint32_t (&a)[4]) {
  const int l = x.lane();
  if (!trans) {
    x.ldmatrix_x4(a, tile + swizzled(m0 + (l & 15), k0 + ((l >> 4) << 3), cols));
  } else {
    const int j = l >> 3, i = l & 7;
    x.ldmatrix_x4_trans(a, tile + swizzled(k0 + i + ((j >> 1) << 3), m0 + ((j & 1) << 3), cols));
  }
}

// The B fragments of two 8-column tiles, columns n0.. and n0 + 8.., rows k0..k0 + 15, of a tile
// stored [n][k] (k contiguous), or, with trans, [k][n] (n contiguous).
template <class X>
GEMMAX_KFN void load_b_frags(X& x, const bf16* tile, int cols, bool trans, int n0, int k0,
                             uint32_t (&b0)[2], uint32_t (&b1)[2]) {
  const int l = x.lane();
  uint32_t r[4];
  if (!trans) {
    x.ldmatrix_x4(
        r, tile + swizzled(n0 + (l & 7) + ((l >> 4) << 3), k0 + (((l >> 3) & 1) << 3), cols));
  } else {
    const int j = l >> 3, i = l & 7;
    x.ldmatrix_x4_trans(r, tile + swizzled(k0 + i + ((j & 1) << 3), n0 + ((j >> 1) << 3), cols));
  }
  b0[0] = r[0];
  b0[1] = r[1];
  b1[0] = r[2];
  b1[1] = r[3];
}

// Row and column within a 16 x 8 accumulator tile of element i of c[4].
GEMMAX_HD int acc_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
GEMMAX_HD int acc_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

// Copies rows x cols bf16 into a swizzled tile with 16-byte asynchronous copies. row_src(r)
// gives the first element of row r's source (columns col0..), or null for a row of zeros;
// columns at or past col_limit (a multiple of 8) are zeros too.
template <class X, class RowSrc>
GEMMAX_KFN void load_tile_async(X& x, bf16* tile, int rows, int cols, RowSrc&& row_src,
                                int64_t col0, int64_t col_limit, const bf16* any_valid) {
  const int chunks = cols / 8;
  for (int e = x.tid(); e < rows * chunks; e += x.nthreads()) {
    const int r = e / chunks, c = e % chunks;
    const bf16* src = row_src(r);
    const bool valid = src != nullptr && col0 + c * 8 < col_limit;
    x.cp_async16(tile + swizzled(r, c * 8, cols), valid ? src + col0 + c * 8 : any_valid, valid);
  }
}

}  // namespace gemmax::kern

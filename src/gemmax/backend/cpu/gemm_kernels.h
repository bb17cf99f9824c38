// The per-ISA pieces of the products (gemm.h): packing B panels and A^T blocks, and the
// register tile. gemm.cc holds the loops around them; gemm_avx512.cc and gemm_portable.cc
// implement them.
//
// Layouts. The reduction index runs in groups of kPair elements (2 for bf16: the pairs
// vdpbf16ps multiplies; 1 for fp32):
//   B panel: 32 columns x kc (padded to a multiple of kPair) as [kc / kPair][32][kPair];
//   A^T block (gemm_tn): nb columns of A x mc rows as [mc / kPair][nb][kPair];
// and a tile multiplies up to kTileRows rows of A by one panel into 32 columns of C.
#pragma once

#include "gemmax/backend/cpu/gemm.h"

namespace gemmax::cpu {

constexpr int kTileRows = 14;
constexpr int kPanelCols = 32;

template <class T>
constexpr int64_t kPair = sizeof(T) == 2 ? 2 : 1;

// One ISA's kernels for element type T.
template <class T>
struct GemmKernels {
  // Packs columns [j0, j0 + nj) (nj <= 32; the rest zero) of B, reduction [p0, p0 + kc),
  // into a panel of kc_pad = round_up(kc, kPair) rows.
  void (*pack_b)(T* panel, const BMatrix<T>& b, int64_t p0, int64_t kc, int64_t j0, int64_t nj);
  // Packs A^T for rows [r0, r0 + mc) (the reduction; padded with zero rows to a multiple of
  // kPair) and columns [n0, n0 + nb) of A.
  void (*pack_at)(T* block, const Rows<const T>& a, int64_t r0, int64_t mc, int64_t n0, int64_t nb);
  // C[i][j] (+)= sum_p A_i[p] B[p][j] for i < rows, j < nj. Row i of A is read from a[i] as
  // groups of kPair elements spaced a_step elements apart (a row-major A: a_step = kPair; a
  // packed A^T block: a_step = nb * kPair); kc reduction elements (an odd tail of a bf16
  // row-major A is read as a single element). C rows c[i], bf16 or fp32.
  void (*tile_to_bf16)(int rows, const T* const* a, int64_t a_step, const T* panel, int64_t kc,
                       bf16* const* c, int64_t nj, bool accumulate);
  void (*tile_to_f32)(int rows, const T* const* a, int64_t a_step, const T* panel, int64_t kc,
                      float* const* c, int64_t nj, bool accumulate);
};

template <class T>
const GemmKernels<T>& avx512_kernels();
template <class T>
const GemmKernels<T>& portable_kernels();

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace gemmax::cpu

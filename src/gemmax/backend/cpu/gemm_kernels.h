// The per-ISA pieces of the products (gemm.h): packing B panels and A^T blocks, and the
// register tile. gemm.cc holds the loops around them; gemm_avx512_bf16.cc and gemm_avx2.cc
// implement them.
//
// Layouts. The reduction index runs in groups of kPair elements (2 for bf16: the pairs
// vdpbf16ps multiplies; 1 for fp32):
//   B panel: 32 columns x kc (padded to a multiple of kPair) as [kc / kPair][32][kPair];
//   A^T block (gemm_tn): nb columns of A x mc rows as [mc / kPair][nb][kPair];
// and a tile multiplies up to kTileRows rows of A by one panel into 32 columns of C. A family
// may pack its B panels wider than its data (b_width: avx512_fp32 widens bf16 to fp32 as
// [kc_pad][32] floats); panels are then b_width times the elements, still addressed as T.
#pragma once

#include <xmmintrin.h>

#include <cstdint>

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
  // T elements per packed element of B: 2 where bf16 panels are widened to fp32 at packing.
  int64_t b_width = 1;
  // Packs a panel reduced over rows (pack_rows_panel) in a wide panel layout; null: the pairs.
  void (*pack_rows)(T* panel, const Rows<const T>& b, int64_t r0, int64_t mc, int64_t k0,
                    int64_t nj) = nullptr;
};

// One family's kernels for element type T (isa.h): vdpbf16ps (fp32 data: FMA), FP32 FMA on
// widened bf16, AMX tiles (bf16 only; hardware or emulated), plain C++ (avx2).
template <class T>
const GemmKernels<T>& avx512_bf16_kernels();
template <class T>
const GemmKernels<T>& avx512_fp32_kernels();
template <class T>
const GemmKernels<T>& amx_kernels(bool emulated);
template <class T>
const GemmKernels<T>& avx2_kernels();

template <class T>
const GemmKernels<T>& kernels(Isa isa) {
  switch (isa) {
    case Isa::Avx512Bf16:
      return avx512_bf16_kernels<T>();
    case Isa::Avx512Fp32:
      return avx512_fp32_kernels<T>();
    case Isa::Amx:
    case Isa::AmxEmulated:
      if constexpr (sizeof(T) == 2) return amx_kernels<T>(isa == Isa::AmxEmulated);
      // fp32 products have no AMX instruction: FMA where the CPU has AVX-512.
      return cpu_features().avx512 ? avx512_fp32_kernels<T>() : avx2_kernels<T>();
    case Isa::Avx2:
      break;
  }
  return avx2_kernels<T>();
}

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// A register tile's first step: fetch the C rows it stores at its end (each row's 32 columns:
// one or two cache lines). An output such as the head's [2048, 16384] logits is not in cache:
// its 14 stores missing together, and the next tile's first stores queued behind them, stalled
// that tile until they reached memory (4% of a head product's time; up to 15% of a product
// over 256).
template <int R, class TC>
[[gnu::always_inline]] inline void prefetch_tile_rows(TC* const* c) {
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {  // the row's last column as an address: it may be past C's end
    const uintptr_t row = reinterpret_cast<uintptr_t>(c[r]);
    _mm_prefetch(reinterpret_cast<const char*>(row), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(row + (kPanelCols - 1) * sizeof(TC)), _MM_HINT_T0);
  }
}

// Elements of T in a packed B panel over `rows` reduction elements (rows padded to kPair); for
// rows a multiple of kPair, also the offset of reduction row `rows` inside a panel.
template <class T>
int64_t packed_elems(const GemmKernels<T>& K, int64_t rows) {
  return round_up(rows, kPair<T>) * kPanelCols * K.b_width;
}

// The panel of a product reduced over rows (gemm_tn's B, attention's dV and dK): rows
// [r0, r0 + mc) of b (the reduction, padded with zero rows to a multiple of kPair) and columns
// [k0, k0 + nj) (nj <= 32; the rest zero) as [mc_pad / kPair][32][kPair].
template <class T>
void pack_rows_panel(const GemmKernels<T>& K, T* panel, const Rows<const T>& b, int64_t r0,
                     int64_t mc, int64_t k0, int64_t nj) {
  constexpr int64_t P = kPair<T>;
  if (K.pack_rows) return K.pack_rows(panel, b, r0, mc, k0, nj);
  if (nj == kPanelCols) return K.pack_at(panel, b, r0, mc, k0, kPanelCols);
  const int64_t mc_pad = round_up(mc, P);
  for (int64_t i = 0; i < mc_pad * kPanelCols; ++i) panel[i] = T{};
  for (int64_t r = 0; r < mc; ++r) {
    const T* src = b(r0 + r) + k0;
    T* dst = panel + (r / P) * kPanelCols * P + r % P;
    for (int64_t j = 0; j < nj; ++j) dst[j * P] = src[j];
  }
}

// C rows (+)= A rows . B on the calling thread: `rows` rows of A (a[i], groups of kPair
// elements a_step apart, kc reduction elements) times packed panels (panel p holds columns
// [32p, 32p + 32) of B; panel_elems apart) into columns [0, n) of C rows c[i].
template <class T, class TC>
void serial_product(const GemmKernels<T>& K, int64_t rows, const T* const* a, int64_t a_step,
                    const T* panels, int64_t panel_elems, int64_t kc, int64_t n, TC* const* c,
                    bool accumulate) {
  TC* c_tile[kTileRows];
  for (int64_t j0 = 0, p = 0; j0 < n; j0 += kPanelCols, ++p)
    for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
      const int r = int(rows - r0 < kTileRows ? rows - r0 : kTileRows);
      for (int i = 0; i < r; ++i) c_tile[i] = c[r0 + i] + j0;
      const int64_t nj = n - j0 < kPanelCols ? n - j0 : kPanelCols;
      if constexpr (sizeof(TC) == 2)
        K.tile_to_bf16(r, a + r0, a_step, panels + p * panel_elems, kc, c_tile, nj, accumulate);
      else
        K.tile_to_f32(r, a + r0, a_step, panels + p * panel_elems, kc, c_tile, nj, accumulate);
    }
}

}  // namespace gemmax::cpu

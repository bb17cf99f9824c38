// The avx512_fp32 family: every product on AVX-512 FP32 FMA, bf16 data widened to fp32 (exact)
// on its way into the registers. For Intel CPUs without AMX, whose vdpbf16ps retires at half
// the rate of their two FMA units. Uses no BF16 instruction (bf16 results are rounded in
// integer arithmetic), so it also runs on AVX-512 CPUs without BF16.
//
// Its packed B panels of bf16 data are fp32, widened once while packing: [kc_pad][32] floats
// (kc_pad = round_up(kc, 2), a zero row padding an odd reduction), twice the bytes of the
// other families' pairs, so that no tile widens B again (a panel is read by every row block).
// A's rows (read in place, or a packed A^T block of pairs) are widened by the tile a chunk of
// the reduction at a time into an L1 buffer, then broadcast into the FMAs. The reduction runs
// element by element in order, one FMA each: the result is that of a sequential fp32 FMA chain.
#include <immintrin.h>

#include <cstring>

// GCC 12 warns inside its own AVX-512 intrinsics (the _mm512_undefined_* they start from).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "gemmax/backend/cpu/gemm_kernels.h"

#define GEMMAX_AVX512_FMA __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

namespace gemmax::cpu {
namespace {

constexpr int64_t kChunk = 128;  // reduction elements of A widened at a time (7-8 KiB)

GEMMAX_AVX512_FMA inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// bf16 [16] -> fp32 [16]: the upper half of each fp32.
GEMMAX_AVX512_FMA inline __m512 widen(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// fp32 [16] -> bf16 [16], nearest even, NaN kept quiet (bf16::round_bits).
GEMMAX_AVX512_FMA inline __m256i narrow(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

GEMMAX_AVX512_FMA inline void store_half(bf16* c, __m512 v, int64_t n, bool accumulate) {
  const __mmask16 m = mask16(n);
  if (!m) return;
  if (accumulate) v = _mm512_add_ps(v, widen(_mm256_maskz_loadu_epi16(m, c)));
  _mm256_mask_storeu_epi16(c, m, narrow(v));
}
GEMMAX_AVX512_FMA inline void store_half(float* c, __m512 v, int64_t n, bool accumulate) {
  const __mmask16 m = mask16(n);
  if (!m) return;
  if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, c));
  _mm512_mask_storeu_ps(c, m, v);
}

// acc[r] += sum_p a_r[p] B[p] over p < kc: row r's element p at a[r] + p * es, B's row p at
// b + p * 32.
template <int R>
GEMMAX_AVX512_FMA inline void fma_block(__m512 (&acc)[R][2], const float* const* a, int64_t es,
                                        const float* b, int64_t kc) {
  for (int64_t p = 0; p < kc; ++p, b += kPanelCols) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r][p * es]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
}

// The same over the widened A buffer: element p of row r at a[r * RS + p * ES], strides known
// at compile time, so the rows are one base register and immediate offsets.
template <int R, int64_t RS, int64_t ES>
GEMMAX_AVX512_FMA inline void fma_block_buf(__m512 (&acc)[R][2], const float* a, const float* b,
                                            int64_t kc) {
  for (int64_t p = 0; p < kc; ++p, b += kPanelCols, a += ES) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * RS]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
}

template <int R, class TC>
GEMMAX_AVX512_FMA void tile_f32(const float* const* a, int64_t a_step, const float* panel,
                                int64_t kc, TC* const* c, int64_t nj, bool accumulate) {
  prefetch_tile_rows<R>(c);
  // Every loop over the accumulators is unrolled, so they live in registers: one that was not
  // kept a copy of them on the stack, stored at each tile's start.
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  fma_block<R>(acc, a, a_step, panel, kc);
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) {
    store_half(c[r], acc[r][0], nj, accumulate);
    store_half(c[r] + 16, acc[r][1], nj - 16, accumulate);
  }
}

// Rows of bf16 A, pairs a_step apart: chunk [k0, k0 + kk) widened into aw. Rows read in place
// (a_step 2) widen row by row into aw[r][p]; rows of a packed A^T block (a_step = nb * 2, row
// r + 1 two elements after row r) widen a pair of the reduction for every row at once into
// aw[p][r]. Returns the element stride of the layout chosen (the row stride is the other).
template <int R>
GEMMAX_AVX512_FMA inline int64_t widen_a(float* aw, const bf16* const* a, int64_t a_step,
                                         int64_t k0, int64_t kk) {
  if (a_step == 2) {
    for (int r = 0; r < R; ++r)
      for (int64_t p = 0; p < kk; p += 16)
        _mm512_storeu_ps(aw + r * kChunk + p,
                         widen(_mm256_maskz_loadu_epi16(mask16(kk - p), a[r] + k0 + p)));
    return 1;
  }
  bool block = true;
  for (int r = 1; r < R; ++r) block = block && a[r] == a[0] + 2 * r;
  if (block && R <= 16) {
    const __m512i hi = _mm512_set1_epi32(int(0xffff0000u));
    for (int64_t p = 0; p < kk; p += 2) {
      const __m512i pairs = _mm512_maskz_loadu_epi32(mask16(R), a[0] + (k0 + p) / 2 * a_step);
      _mm512_storeu_ps(aw + p * 16, _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)));
      _mm512_storeu_ps(aw + (p + 1) * 16, _mm512_castsi512_ps(_mm512_and_si512(pairs, hi)));
    }
    return 16;
  }
  for (int r = 0; r < R; ++r)
    for (int64_t p = 0; p < kk; ++p)
      aw[r * kChunk + p] = float(a[r][(k0 + p) / 2 * a_step + ((k0 + p) & 1)]);
  return 1;
}

// A tile over a widened panel: A's chunks widened (widen_a), then FMAs against the panel's rows.
template <int R, class TC>
GEMMAX_AVX512_FMA void tile_bf16(const bf16* const* a, int64_t a_step, const bf16* packed,
                                 int64_t kc, TC* const* c, int64_t nj, bool accumulate) {
  const float* panel = reinterpret_cast<const float*>(packed);  // fp32 panel (pack_b_wide)
  alignas(64) float aw[kChunk * 16 > R * kChunk ? kChunk * 16 : R * kChunk];
  prefetch_tile_rows<R>(c);
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < kc; k0 += kChunk) {  // k0 even: chunks start at a pair
    const int64_t kk = kc - k0 < kChunk ? kc - k0 : kChunk;
    if (widen_a<R>(aw, a, a_step, k0, kk) == 1)
      fma_block_buf<R, kChunk, 1>(acc, aw, panel + k0 * kPanelCols, kk);
    else
      fma_block_buf<R, 1, 16>(acc, aw, panel + k0 * kPanelCols, kk);
  }
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) {
    store_half(c[r], acc[r][0], nj, accumulate);
    store_half(c[r] + 16, acc[r][1], nj - 16, accumulate);
  }
}

// Packs columns [j0, j0 + nj) of bf16 B, reduction [p0, p0 + kc), widened: row p of the panel
// is B[p0 + p][j0 .. j0 + 32) in fp32, zero past nj and in the pad row of an odd kc.
GEMMAX_AVX512_FMA void pack_b_wide(bf16* packed, const BMatrix<bf16>& b, int64_t p0, int64_t kc,
                                   int64_t j0, int64_t nj) {
  float* panel = reinterpret_cast<float*>(packed);
  const __mmask16 m0 = mask16(nj), m1 = mask16(nj - 16);
  if (!b.transposed) {  // W [k, n]: row p of the panel is row p0 + p of W
    for (int64_t p = 0; p < kc; ++p) {
      const bf16* row = b.w + (p0 + p) * b.ldw + j0;
      _mm512_storeu_ps(panel + p * kPanelCols, widen(_mm256_maskz_loadu_epi16(m0, row)));
      _mm512_storeu_ps(panel + p * kPanelCols + 16, widen(_mm256_maskz_loadu_epi16(m1, row + 16)));
    }
  } else {
    // W [n, k]: column j of the panel is row j0 + j of W. Its pairs are 32-bit words, gathered
    // 16 rows at a time; a word's low half is reduction row 2q, its high half row 2q + 1.
    const int64_t full = kc / 2;
    const bf16* base0 = b.w + j0 * b.ldw + p0;
    if (b.ldw % 2 == 0 && reinterpret_cast<uintptr_t>(base0) % 4 == 0) {
      const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
      const __m512i offsets = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(int(b.ldw / 2)));
      const __m512i hi = _mm512_set1_epi32(int(0xffff0000u));
      const int* w0 = reinterpret_cast<const int*>(base0);
      const int* w1 = reinterpret_cast<const int*>(base0 + 16 * b.ldw);
      for (int64_t q = 0; q < full; ++q) {
        const __m512i x0 =
            _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m0, offsets, w0 + q, 4);
        const __m512i x1 =
            _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m1, offsets, w1 + q, 4);
        float* even = panel + 2 * q * kPanelCols;
        _mm512_storeu_ps(even, _mm512_castsi512_ps(_mm512_slli_epi32(x0, 16)));
        _mm512_storeu_ps(even + 16, _mm512_castsi512_ps(_mm512_slli_epi32(x1, 16)));
        _mm512_storeu_ps(even + 32, _mm512_castsi512_ps(_mm512_and_si512(x0, hi)));
        _mm512_storeu_ps(even + 48, _mm512_castsi512_ps(_mm512_and_si512(x1, hi)));
      }
    } else {  // rows not 4-byte aligned: one element at a time
      for (int64_t p = 0; p < 2 * full; ++p)
        for (int64_t j = 0; j < kPanelCols; ++j)
          panel[p * kPanelCols + j] = j < nj ? float(b.w[(j0 + j) * b.ldw + p0 + p]) : 0.0f;
    }
    if (kc & 1)
      for (int64_t j = 0; j < kPanelCols; ++j)
        panel[(kc - 1) * kPanelCols + j] =
            j < nj ? float(b.w[(j0 + j) * b.ldw + p0 + kc - 1]) : 0.0f;
  }
  if (kc & 1) std::memset(panel + kc * kPanelCols, 0, kPanelCols * sizeof(float));
}

// The panel of a product reduced over rows (gemm_kernels.h, pack_rows_panel), widened: row r
// of the panel is row r0 + r of b, columns [k0, k0 + nj), in fp32; an odd mc gets a zero row.
GEMMAX_AVX512_FMA void pack_rows_wide(bf16* packed, const Rows<const bf16>& b, int64_t r0,
                                      int64_t mc, int64_t k0, int64_t nj) {
  float* panel = reinterpret_cast<float*>(packed);
  const __mmask16 m0 = mask16(nj), m1 = mask16(nj - 16);
  for (int64_t r = 0; r < mc; ++r) {
    const bf16* row = b(r0 + r) + k0;
    _mm512_storeu_ps(panel + r * kPanelCols, widen(_mm256_maskz_loadu_epi16(m0, row)));
    _mm512_storeu_ps(panel + r * kPanelCols + 16, widen(_mm256_maskz_loadu_epi16(m1, row + 16)));
  }
  if (mc & 1) std::memset(panel + mc * kPanelCols, 0, kPanelCols * sizeof(float));
}

template <class T, class TC>
GEMMAX_AVX512_FMA void tile_rows(int rows, const T* const* a, int64_t a_step, const T* panel,
                                 int64_t kc, TC* const* c, int64_t nj, bool accumulate) {
  switch (rows) {
#define GEMMAX_TILE_CASE(R)                                             \
  case R:                                                               \
    if constexpr (sizeof(T) == 2)                                       \
      return tile_bf16<R, TC>(a, a_step, panel, kc, c, nj, accumulate); \
    else                                                                \
      return tile_f32<R, TC>(a, a_step, panel, kc, c, nj, accumulate);
    GEMMAX_TILE_CASE(1)
    GEMMAX_TILE_CASE(2)
    GEMMAX_TILE_CASE(3)
    GEMMAX_TILE_CASE(4)
    GEMMAX_TILE_CASE(5)
    GEMMAX_TILE_CASE(6)
    GEMMAX_TILE_CASE(7)
    GEMMAX_TILE_CASE(8)
    GEMMAX_TILE_CASE(9)
    GEMMAX_TILE_CASE(10)
    GEMMAX_TILE_CASE(11)
    GEMMAX_TILE_CASE(12)
    GEMMAX_TILE_CASE(13)
    GEMMAX_TILE_CASE(14)
#undef GEMMAX_TILE_CASE
  }
}

}  // namespace

template <>
const GemmKernels<bf16>& avx512_fp32_kernels<bf16>() {
  // A^T blocks stay bf16 pairs (the tile widens A); B panels are widened at packing.
  static const GemmKernels<bf16> k{pack_b_wide,
                                   avx512_bf16_kernels<bf16>().pack_at,
                                   tile_rows<bf16, bf16>,
                                   tile_rows<bf16, float>,
                                   2,
                                   pack_rows_wide};
  return k;
}

template <>
const GemmKernels<float>& avx512_fp32_kernels<float>() {
  static const GemmKernels<float> k{avx512_bf16_kernels<float>().pack_b,
                                    avx512_bf16_kernels<float>().pack_at, tile_rows<float, bf16>,
                                    tile_rows<float, float>};
  return k;
}

}  // namespace gemmax::cpu

// The avx512_bf16 family's kernels of the products: bf16 pairs through vdpbf16ps (fp32
// accumulation, 64 flops per instruction), fp32 through FMA. Only these functions use AVX-512
// (target attributes): the rest of the binary runs on any x86-64-v3 CPU, and gemm.cc calls
// these only after isa.h found the instructions. The packing needs no BF16 instruction
// (GEMMAX_AVX512_PACK): the avx512_fp32 family packs with it on CPUs without AVX-512 BF16.
#include <immintrin.h>

#include <cstring>

// GCC 12 warns inside its own AVX-512 intrinsics (the _mm512_undefined_* they start from).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "gemmax/backend/cpu/gemm_kernels.h"
#include "gemmax/backend/cpu/simd.h"

namespace gemmax::cpu {
namespace {

#define GEMMAX_AVX512_PACK __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

GEMMAX_AVX512_PACK inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

GEMMAX_AVX512_PACK inline __mmask32 col_mask32(int64_t nj) {
  return nj >= 32 ? __mmask32(~0u) : __mmask32((1u << nj) - 1);
}
GEMMAX_AVX512_PACK inline __mmask16 col_mask16(int64_t nj) {
  return nj >= 16 ? __mmask16(0xffff) : nj <= 0 ? __mmask16(0) : __mmask16((1u << nj) - 1);
}

// bf16 [16] -> fp32 [16]: the upper half of each fp32.
GEMMAX_AVX512 inline __m512 widen(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Writes 32 fp32 accumulators (lo: columns 0-15, hi: 16-31) to row c, nj columns.
GEMMAX_AVX512 inline void store_row(bf16* c, __m512 lo, __m512 hi, int64_t nj, bool accumulate) {
  const __mmask32 m = col_mask32(nj);
  if (accumulate) {
    const __m512i old = _mm512_maskz_loadu_epi16(m, c);
    lo = _mm512_add_ps(lo, widen(_mm512_castsi512_si256(old)));
    hi = _mm512_add_ps(hi, widen(_mm512_extracti64x4_epi64(old, 1)));
  }
  _mm512_mask_storeu_epi16(c, m, __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
}
GEMMAX_AVX512 inline void store_row(float* c, __m512 lo, __m512 hi, int64_t nj, bool accumulate) {
  const __mmask16 m0 = col_mask16(nj), m1 = col_mask16(nj - 16);
  if (accumulate) {
    lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(m0, c));
    hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(m1, c + 16));
  }
  _mm512_mask_storeu_ps(c, m0, lo);
  _mm512_mask_storeu_ps(c + 16, m1, hi);
}

// ---- bf16 -------------------------------------------------------------------------------------

template <int R, class TC>
GEMMAX_AVX512 void tile_bf16(const bf16* const* a, int64_t a_step, const bf16* panel, int64_t kc,
                             TC* const* c, int64_t nj, bool accumulate) {
  prefetch_tile_rows<R>(c);
  // Every loop over the accumulators is unrolled, so they live in registers: one that was not
  // kept a copy of them on the stack, stored at each tile's start.
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const int64_t pairs = kc / 2;
  const bf16* b = panel;
  for (int64_t kp = 0; kp < pairs; ++kp, b += 64) {
    const __m512bh b0 = __m512bh(_mm512_loadu_si512(b));
    const __m512bh b1 = __m512bh(_mm512_loadu_si512(b + 32));
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      const __m512bh av = __m512bh(_mm512_set1_epi32(int(load_u32(a[r] + kp * a_step))));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  if (kc & 1) {  // an odd reduction: the last element alone (the panel pads its pair with 0)
    const __m512bh b0 = __m512bh(_mm512_loadu_si512(b));
    const __m512bh b1 = __m512bh(_mm512_loadu_si512(b + 32));
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      const __m512bh av = __m512bh(_mm512_set1_epi32(int(a[r][pairs * a_step].bits)));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) store_row(c[r], acc[r][0], acc[r][1], nj, accumulate);
}

// 32 bf16 of row0 and row1 interleaved as pairs: out[2j] = row0[j], out[2j + 1] = row1[j].
GEMMAX_AVX512_PACK inline void interleave32(bf16* out, const bf16* row0, const bf16* row1,
                                            int64_t n) {
  const __mmask32 m = col_mask32(n);
  const __m512i r0 = _mm512_maskz_loadu_epi16(m, row0);
  const __m512i r1 = row1 ? _mm512_maskz_loadu_epi16(m, row1) : _mm512_setzero_si512();
  alignas(64) static const uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                               37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                               11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static const uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                               53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                               27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_permutex2var_epi16(r0, _mm512_load_si512(kLo), r1);
  const __m512i hi = _mm512_permutex2var_epi16(r0, _mm512_load_si512(kHi), r1);
  if (n >= 32) {
    _mm512_storeu_si512(out, lo);
    _mm512_storeu_si512(out + 32, hi);
  } else {  // n pairs: 2n elements
    _mm512_mask_storeu_epi16(out, col_mask32(2 * n), lo);
    if (n > 16) _mm512_mask_storeu_epi16(out + 32, col_mask32(2 * n - 32), hi);
  }
}

GEMMAX_AVX512_PACK void pack_b_bf16(bf16* panel, const BMatrix<bf16>& b, int64_t p0, int64_t kc,
                                    int64_t j0, int64_t nj) {
  const int64_t pairs = (kc + 1) / 2;
  if (!b.transposed) {  // W [k, n]: interleave rows p and p + 1
    for (int64_t kp = 0; kp < pairs; ++kp) {
      const bf16* r0 = b.w + (p0 + 2 * kp) * b.ldw + j0;
      const bf16* r1 = 2 * kp + 1 < kc ? r0 + b.ldw : nullptr;
      bf16* out = panel + kp * 64;
      if (nj < 32) std::memset(static_cast<void*>(out), 0, 64 * sizeof(bf16));
      interleave32(out, r0, r1, nj);
    }
    return;
  }
  // W [n, k]: column j of the panel is row j0 + j of W; its pairs are 32-bit words, gathered
  // 16 rows at a time.
  uint32_t* out = reinterpret_cast<uint32_t*>(panel);
  const int64_t full = kc / 2;
  const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i offsets = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(int(b.ldw / 2)));
  const bool even_rows = (b.ldw % 2) == 0;
  const __mmask16 m0 = col_mask16(nj), m1 = col_mask16(nj - 16);
  const bf16* base0 = b.w + j0 * b.ldw + p0;
  const bf16* base1 = base0 + 16 * b.ldw;
  if (even_rows && (reinterpret_cast<uintptr_t>(base0) % 4) == 0) {
    const int* w0 = reinterpret_cast<const int*>(base0);
    const int* w1 = reinterpret_cast<const int*>(base1);
    for (int64_t kp = 0; kp < full; ++kp) {
      _mm512_storeu_si512(out + kp * 32, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m0,
                                                                     offsets, w0 + kp, 4));
      _mm512_storeu_si512(out + kp * 32 + 16, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(),
                                                                          m1, offsets, w1 + kp, 4));
    }
  } else {  // rows not 4-byte aligned: one word at a time
    for (int64_t j = 0; j < 32; ++j)
      for (int64_t kp = 0; kp < full; ++kp)
        out[kp * 32 + j] = j < nj ? load_u32(b.w + (j0 + j) * b.ldw + p0 + 2 * kp) : 0u;
  }
  if (kc & 1)
    for (int64_t j = 0; j < 32; ++j)
      out[full * 32 + j] = j < nj ? b.w[(j0 + j) * b.ldw + p0 + kc - 1].bits : 0u;
}

GEMMAX_AVX512_PACK void pack_at_bf16(bf16* block, const Rows<const bf16>& a, int64_t r0, int64_t mc,
                                     int64_t n0, int64_t nb) {
  const int64_t pairs = (mc + 1) / 2;
  for (int64_t rp = 0; rp < pairs; ++rp) {
    const bf16* x0 = a(r0 + 2 * rp) + n0;
    const bf16* x1 = 2 * rp + 1 < mc ? a(r0 + 2 * rp + 1) + n0 : nullptr;
    bf16* out = block + rp * nb * 2;
    for (int64_t i = 0; i < nb; i += 32)
      interleave32(out + 2 * i, x0 + i, x1 ? x1 + i : nullptr, nb - i < 32 ? nb - i : 32);
  }
}

// ---- fp32 -------------------------------------------------------------------------------------

template <int R, class TC>
GEMMAX_AVX512 void tile_f32(const float* const* a, int64_t a_step, const float* panel, int64_t kc,
                            TC* const* c, int64_t nj, bool accumulate) {
  prefetch_tile_rows<R>(c);
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const float* b = panel;
  for (int64_t p = 0; p < kc; ++p, b += 32) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r][p * a_step]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) store_row(c[r], acc[r][0], acc[r][1], nj, accumulate);
}

GEMMAX_AVX512_PACK void pack_b_f32(float* panel, const BMatrix<float>& b, int64_t p0, int64_t kc,
                                   int64_t j0, int64_t nj) {
  const __mmask16 m0 = col_mask16(nj), m1 = col_mask16(nj - 16);
  for (int64_t p = 0; p < kc; ++p) {
    float* out = panel + p * 32;
    if (!b.transposed) {
      const float* row = b.w + (p0 + p) * b.ldw + j0;
      _mm512_storeu_ps(out, _mm512_maskz_loadu_ps(m0, row));
      _mm512_storeu_ps(out + 16, _mm512_maskz_loadu_ps(m1, row + 16));
    } else {
      for (int64_t j = 0; j < 32; ++j) out[j] = j < nj ? b.w[(j0 + j) * b.ldw + p0 + p] : 0.0f;
    }
  }
}

GEMMAX_AVX512_PACK void pack_at_f32(float* block, const Rows<const float>& a, int64_t r0,
                                    int64_t mc, int64_t n0, int64_t nb) {
  for (int64_t p = 0; p < mc; ++p) std::memcpy(block + p * nb, a(r0 + p) + n0, nb * sizeof(float));
}

// ---- dispatch over the tile height ---------------------------------------------------------

template <class TC>
GEMMAX_AVX512 void tile_rows_bf16(int rows, const bf16* const* a, int64_t a_step, const bf16* panel,
                                  int64_t kc, TC* const* c, int64_t nj, bool accumulate) {
  switch (rows) {
#define GEMMAX_TILE_CASE(R) \
  case R:                   \
    return tile_bf16<R, TC>(a, a_step, panel, kc, c, nj, accumulate);
    GEMMAX_TILE_CASE(1)
    GEMMAX_TILE_CASE(2)
    GEMMAX_TILE_CASE(3)
    GEMMAX_TILE_CASE(4)
    GEMMAX_TILE_CASE(5)
    GEMMAX_TILE_CASE(6)
    GEMMAX_TILE_CASE(7) GEMMAX_TILE_CASE(8) GEMMAX_TILE_CASE(9) GEMMAX_TILE_CASE(10)
        GEMMAX_TILE_CASE(11) GEMMAX_TILE_CASE(12) GEMMAX_TILE_CASE(13) GEMMAX_TILE_CASE(14)
#undef GEMMAX_TILE_CASE
  }
}

template <class TC>
GEMMAX_AVX512 void tile_rows_f32(int rows, const float* const* a, int64_t a_step,
                                 const float* panel, int64_t kc, TC* const* c, int64_t nj,
                                 bool accumulate) {
  switch (rows) {
#define GEMMAX_TILE_CASE(R) \
  case R:                   \
    return tile_f32<R, TC>(a, a_step, panel, kc, c, nj, accumulate);
    GEMMAX_TILE_CASE(1)
    GEMMAX_TILE_CASE(2)
    GEMMAX_TILE_CASE(3)
    GEMMAX_TILE_CASE(4)
    GEMMAX_TILE_CASE(5)
    GEMMAX_TILE_CASE(6)
    GEMMAX_TILE_CASE(7) GEMMAX_TILE_CASE(8) GEMMAX_TILE_CASE(9) GEMMAX_TILE_CASE(10)
        GEMMAX_TILE_CASE(11) GEMMAX_TILE_CASE(12) GEMMAX_TILE_CASE(13) GEMMAX_TILE_CASE(14)
#undef GEMMAX_TILE_CASE
  }
}

}  // namespace

template <>
const GemmKernels<bf16>& avx512_bf16_kernels<bf16>() {
  static const GemmKernels<bf16> k{pack_b_bf16, pack_at_bf16, tile_rows_bf16<bf16>,
                                   tile_rows_bf16<float>};
  return k;
}

template <>
const GemmKernels<float>& avx512_bf16_kernels<float>() {
  static const GemmKernels<float> k{pack_b_f32, pack_at_f32, tile_rows_f32<bf16>,
                                    tile_rows_f32<float>};
  return k;
}

}  // namespace gemmax::cpu

// The avx2 family's kernels of the products, for CPUs without AVX-512 (and forced by
// cpu_kernels=avx2): the same packed layouts and tiles in plain C++, which the compiler
// vectorises for the build's target (AVX2 + FMA at -march=x86-64-v3). bf16 products are formed
// in fp32.
#include <cstring>

#include "gemmax/backend/cpu/gemm_kernels.h"

namespace gemmax::cpu {
namespace {

inline float f(bf16 x) { return float(x); }
inline float f(float x) { return x; }

inline void store(bf16* c, const float* acc, int64_t nj, bool accumulate) {
  for (int64_t j = 0; j < nj; ++j) c[j] = bf16(accumulate ? float(c[j]) + acc[j] : acc[j]);
}
inline void store(float* c, const float* acc, int64_t nj, bool accumulate) {
  for (int64_t j = 0; j < nj; ++j) c[j] = accumulate ? c[j] + acc[j] : acc[j];
}

template <class T, class TC>
void tile(int rows, const T* const* a, int64_t a_step, const T* panel, int64_t kc, TC* const* c,
          int64_t nj, bool accumulate) {
  constexpr int64_t P = kPair<T>;
  float acc[kTileRows][kPanelCols] = {};
  const int64_t groups = kc / P;
  for (int64_t g = 0; g < groups; ++g) {
    const T* b = panel + g * kPanelCols * P;
    for (int r = 0; r < rows; ++r) {
      const T* ar = a[r] + g * a_step;
      for (int64_t e = 0; e < P; ++e) {
        const float av = f(ar[e]);
        for (int j = 0; j < kPanelCols; ++j) acc[r][j] += av * f(b[j * P + e]);
      }
    }
  }
  if (kc % P) {  // an odd bf16 reduction: the last element alone
    const T* b = panel + groups * kPanelCols * P;
    for (int r = 0; r < rows; ++r) {
      const float av = f(a[r][groups * a_step]);
      for (int j = 0; j < kPanelCols; ++j) acc[r][j] += av * f(b[j * P]);
    }
  }
  for (int r = 0; r < rows; ++r) store(c[r], acc[r], nj, accumulate);
}

template <class T>
void pack_b(T* panel, const BMatrix<T>& b, int64_t p0, int64_t kc, int64_t j0, int64_t nj) {
  constexpr int64_t P = kPair<T>;
  const int64_t kc_pad = round_up(kc, P);
  for (int64_t p = 0; p < kc_pad; ++p)
    for (int64_t j = 0; j < kPanelCols; ++j) {
      T v{};
      if (p < kc && j < nj)
        v = b.transposed ? b.w[(j0 + j) * b.ldw + p0 + p] : b.w[(p0 + p) * b.ldw + j0 + j];
      panel[((p / P) * kPanelCols + j) * P + p % P] = v;
    }
}

template <class T>
void pack_at(T* block, const Rows<const T>& a, int64_t r0, int64_t mc, int64_t n0, int64_t nb) {
  constexpr int64_t P = kPair<T>;
  const int64_t mc_pad = round_up(mc, P);
  for (int64_t p = 0; p < mc_pad; ++p) {
    const T* row = p < mc ? a(r0 + p) + n0 : nullptr;
    for (int64_t i = 0; i < nb; ++i) block[((p / P) * nb + i) * P + p % P] = row ? row[i] : T{};
  }
}

}  // namespace

template <>
const GemmKernels<bf16>& avx2_kernels<bf16>() {
  static const GemmKernels<bf16> k{pack_b<bf16>, pack_at<bf16>, tile<bf16, bf16>,
                                   tile<bf16, float>};
  return k;
}

template <>
const GemmKernels<float>& avx2_kernels<float>() {
  static const GemmKernels<float> k{pack_b<float>, pack_at<float>, tile<float, bf16>,
                                    tile<float, float>};
  return k;
}

}  // namespace gemmax::cpu

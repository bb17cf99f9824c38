// Quantised weights.
#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"
#include "gemmax/base/nf4.h"

namespace gemmax {
using namespace cpu;

namespace {

// o[2j], o[2j + 1] = the two elements of byte j of q, for `pairs` bytes of one block.
template <class T>
GEMMAX_SIMD_BODY void dequantize_pairs(T* o, const uint8_t* q, int64_t pairs, float scale,
                                       const float* lut) {
#pragma omp simd
  for (int64_t j = 0; j < pairs; ++j) {
    o[2 * j] = from_f32<T>(lut[q[j] >> 4] * scale);
    o[2 * j + 1] = from_f32<T>(lut[q[j] & 15] * scale);
  }
}
template <class T>
GEMMAX_AVX512 void dequantize_pairs_avx512(T* o, const uint8_t* q, int64_t pairs, float scale,
                                           const float* lut) {
  dequantize_pairs(o, q, pairs, scale, lut);
}

}  // namespace

void CpuBackend::do_dequantize_nf4(const DequantizeNf4Args& args, NoDims) {
  const auto& [out, codes, absmax, block] = args;
  if (is_wide(out)) return reference_.do_dequantize_nf4(args, {});
  float lut[16];
  for (uint32_t v = 0; v < 16; ++v) lut[v] = nf4_value(v);
  const uint8_t* q = codes.data<uint8_t>();
  const float* scale = absmax.data<float>();
  const int64_t n = out.numel(), blocks = nf4_blocks(n, block);
  const bool avx512 = wide_vectors(isa_);
  dispatch<float, bf16>(out, "dequantize_nf4", [&]<class T>() {
    T* o = out.data<T>();
    // A block starts on a byte (block is even); only the last one may end inside a byte.
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t lo = b * block, len = std::min(block, n - lo);
      if (avx512)
        dequantize_pairs_avx512(o + lo, q + lo / 2, len / 2, scale[b], lut);
      else
        dequantize_pairs(o + lo, q + lo / 2, len / 2, scale[b], lut);
      if (len % 2) o[n - 1] = from_f32<T>(lut[q[(n - 1) / 2] >> 4] * scale[b]);
    }
  });
}

}  // namespace gemmax

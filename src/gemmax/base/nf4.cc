#include "gemmax/base/nf4.h"

#include <algorithm>
#include <cmath>

#include "gemmax/base/error.h"

namespace gemmax {

uint8_t nf4_index(float v) {
  // bitsandbytes' thresholds, its float32 literals: each is the exact midpoint of two neighbouring
  // code values (so that v goes to the nearest one), rounded to float32 as the literal rounds (four
  // midpoints are float32 ties, which the literals do not break to even). Its tree tests `v > t`
  // down to a leaf; as the thresholds ascend, that leaf is the number of thresholds v exceeds: the
  // same index for every v (a value on a threshold takes the lower index, a NaN index 0).
  constexpr float kThresholds[15] = {
      -0.8480964004993439f,  -0.6106329262256622f,  -0.4599952697753906f,   -0.33967943489551544f,
      -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
      0.1202552504837513f,   0.2035212516784668f,   0.2920137718319893f,    0.3893125355243683f,
      0.5016634166240692f,   0.6427869200706482f,   0.8614784181118011f};
  uint8_t index = 0;
  for (float t : kThresholds) index += uint8_t(v > t);
  return index;
}

void nf4_quantize(const float* x, int64_t n, int64_t block, uint8_t* codes, float* absmax) {
  GEMMAX_CHECK(block >= 2 && block % 2 == 0, "nf4_quantize: the block size must be even and at ",
               "least 2, got ", block);
  const int64_t blocks = nf4_blocks(n, block);
  // Blocks start on byte boundaries (block is even): each writes bytes of its own.
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * block, hi = std::min(n, lo + block);
    float m = 0;
    for (int64_t i = lo; i < hi; ++i) m = std::fmax(m, std::fabs(x[i]));
    absmax[b] = m;
    // bitsandbytes scales by the float32 reciprocal. A block of zeros has none: its elements are
    // quantised as 0 (index 7), as bitsandbytes' torch backend does (its CUDA kernel computes
    // 0 * inf = NaN and writes index 0, which reads back as -0.0).
    const float r = m > 0 ? 1.0f / m : 0.0f;
    for (int64_t i = lo; i < hi; i += 2) {
      // An odd n: bitsandbytes quantises a 0 in the place of element n, the last low nibble.
      const float second = i + 1 < hi ? x[i + 1] : 0.0f;
      codes[i / 2] = uint8_t(nf4_index(x[i] * r) << 4 | nf4_index(second * r));
    }
  }
}

void nf4_dequantize(const uint8_t* codes, const float* absmax, int64_t n, int64_t block,
                    float* out) {
  GEMMAX_CHECK(block >= 2 && block % 2 == 0, "nf4_dequantize: the block size must be even and ",
               "at least 2, got ", block);
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = nf4_value(nf4_index_at(codes, i)) * absmax[i / block];
}

}  // namespace gemmax

// NF4, the 4-bit NormalFloat of QLoRA (Dettmers et al., 2023), stored as bitsandbytes stores it,
// so that weights quantised here or there read the same:
// - blocks of `block` consecutive elements share one scale, absmax[b] = max |x| over block b
//   (float32);
// - element i is the index of a code value (nf4_value), two to a byte: element 2j in the high
//   nibble of byte j, element 2j + 1 in the low one;
// - x[i] reads back as nf4_value(code) * absmax[i / block], the product in float32.
#pragma once

#include <cstdint>

#include "gemmax/base/host_device.h"

namespace gemmax {

// The 16 code values: bitsandbytes' nf4_dequantization_lut (csrc/kernels.cu), which is
// get_4bit_type("nf4") of bitsandbytes/functional.py. Ascending; index 7 is 0.
GEMMAX_HOST_DEVICE inline float nf4_value(uint32_t index) {
  constexpr float kValues[16] = {-1.0f,
                                 -0.6961928009986877f,
                                 -0.5250730514526367f,
                                 -0.39491748809814453f,
                                 -0.28444138169288635f,
                                 -0.18477343022823334f,
                                 -0.09105003625154495f,
                                 0.0f,
                                 0.07958029955625534f,
                                 0.16093020141124725f,
                                 0.24611230194568634f,
                                 0.33791524171829224f,
                                 0.44070982933044434f,
                                 0.5626170039176941f,
                                 0.7229568362236023f,
                                 1.0f};
  return kValues[index & 15];
}

// The code index of element i of packed codes.
GEMMAX_HOST_DEVICE inline uint32_t nf4_index_at(const uint8_t* codes, int64_t i) {
  return (i & 1) ? codes[i >> 1] & 15u : uint32_t(codes[i >> 1]) >> 4;
}

// Bytes of codes and blocks of scales of n elements.
GEMMAX_HOST_DEVICE inline int64_t nf4_code_bytes(int64_t n) { return (n + 1) / 2; }
GEMMAX_HOST_DEVICE inline int64_t nf4_blocks(int64_t n, int64_t block) {
  return (n + block - 1) / block;
}

// The index bitsandbytes' quantiser gives v = x / absmax: its decision tree (dQuantizeNF4).
uint8_t nf4_index(float v);

// Quantises x [n] in blocks of `block` (even, >= 2) into codes [nf4_code_bytes(n)] and absmax
// [nf4_blocks(n, block)], as bitsandbytes' kQuantizeBlockwise does.
void nf4_quantize(const float* x, int64_t n, int64_t block, uint8_t* codes, float* absmax);
// out [n] = the values codes and absmax stand for.
void nf4_dequantize(const uint8_t* codes, const float* absmax, int64_t n, int64_t block,
                    float* out);

}  // namespace gemmax

// Kernels of quantised weights: NF4 (base/nf4.h).
#pragma once

#include "gemmax/backend/cuda/kernels/elementwise.h"
#include "gemmax/base/nf4.h"

namespace gemmax::kern {

// out[i] = nf4_value(code i) * absmax[i / block], in fp32, rounded once to E. A thread per byte of
// codes (its two elements share a block, as block is even); the code book is read from shared
// memory (16 floats).
struct DequantizeNf4Kernel {
  static constexpr int kMaxThreads = 256;
  static constexpr size_t kSmem = 16 * sizeof(float);
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* out, const uint8_t* codes, const float* absmax, int64_t n,
                             int64_t block) const {
    float* lut = x.template smem<float>();
    if (x.tid() < 16) lut[x.tid()] = nf4_value(uint32_t(x.tid()));
    x.sync();
    GEMMAX_GRID_STRIDE(x, j, (n + 1) / 2) {
      const uint32_t q = codes[j];
      const float scale = absmax[2 * j / block];
      out[2 * j] = from_acc<E>(lut[q >> 4] * scale);
      if (2 * j + 1 < n) out[2 * j + 1] = from_acc<E>(lut[q & 15] * scale);
    }
  }
};

}  // namespace gemmax::kern

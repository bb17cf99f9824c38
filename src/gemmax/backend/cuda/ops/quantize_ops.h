// Quantised weights: NF4 dequantisation.
#pragma once

#include "gemmax/backend/cuda/kernels/quantize.h"
#include "gemmax/backend/cuda/ops/common.h"

namespace gemmax::cuda::ops {

template <class P>
void dequantize_nf4(P& p, const DequantizeNf4Args& args, NoDims) {
  const auto& [out, codes, absmax, block] = args;
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch<float, bf16, double>(out, "dequantize_nf4", [&]<class E>() {
    Launch l = stride_launch((n + 1) / 2);
    l.smem = kern::DequantizeNf4Kernel::kSmem;
    p.template launch<kern::DequantizeNf4Kernel>(
        l, ptr<E>(out), const_cast<const uint8_t*>(ptr<uint8_t>(codes)),
        const_cast<const float*>(ptr<float>(absmax)), n, block);
  });
}

}  // namespace gemmax::cuda::ops

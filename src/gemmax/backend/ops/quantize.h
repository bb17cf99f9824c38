// Quantised weights: the frozen base weights of QLoRA, stored in NF4 (base/nf4.h).
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

// out [any shape, n elements] = nf4_value(code of element i) * absmax[i / block], the product in
// float32 (as bitsandbytes' kDequantizeBlockwise) rounded once to out's dtype (bfloat16, float32
// or float64). codes: uint8 [ceil(n / 2)], element 2j in the high nibble of byte j and 2j + 1 in
// the low one (an odd n's last low nibble is not read); absmax: float32 [ceil(n / block)]; block
// even, at least 2.
struct DequantizeNf4Args {
  const Tensor& out;
  const Tensor& codes;
  const Tensor& absmax;
  int64_t block = 64;
};

void validate(const DequantizeNf4Args& args);

#define GEMMAX_QUANTIZE_OPS(X) X(dequantize_nf4, DequantizeNf4Args, NormsElementwise)

}  // namespace gemmax

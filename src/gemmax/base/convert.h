// Element type conversion between whole tensors (checkpoint load/save, tests).
#pragma once

#include "gemmax/base/memory.h"
#include "gemmax/base/tensor.h"

namespace gemmax {

// Returns a new host tensor with the elements of `src` converted to `dst`.
//   floats: F32, F64, BF16 both ways; F16 as a source only. Narrowing rounds to nearest even,
//           with a single rounding (F64 -> BF16 does not round twice through F32).
//   ints:   I32 <-> I64; an I64 value outside the I32 range is an error naming its index.
//   same dtype: a plain copy.
// Anything else (float <-> int, U8, writing F16) is an error naming both dtypes.
Tensor convert_dtype(const Tensor& src, DType dst, MemKind kind = MemKind::Workspace);

// The same conversion into `dst` (a host tensor, or a view of one, with src's element count).
void convert_into(const Tensor& src, const Tensor& dst);

// F64 -> BF16 with one correct rounding (round to nearest even).
uint16_t double_to_bf16_bits(double d);

}  // namespace gemmax

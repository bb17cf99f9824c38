#include "gemmax/backend/ops/quantize.h"

#include "gemmax/backend/ops/check.h"
#include "gemmax/base/nf4.h"

namespace gemmax {

void validate(const DequantizeNf4Args& args) {
  const auto& [out, codes, absmax, block] = args;
  const DType dt = out.dtype();
  GEMMAX_CHECK(dt == DType::BF16 || dt == DType::F32 || dt == DType::F64,
               "dequantize_nf4: the output must be bfloat16, float32 or float64, got ", out.str());
  GEMMAX_CHECK(block >= 2 && block % 2 == 0,
               "dequantize_nf4: the block size must be even and at least 2, got ", block);
  const int64_t n = out.numel(), bytes = nf4_code_bytes(n), blocks = nf4_blocks(n, block);
  GEMMAX_CHECK(codes.dtype() == DType::U8 && codes.numel() == bytes, "dequantize_nf4: ", n,
               " elements need uint8 codes of ", bytes, " bytes, got ", codes.str());
  GEMMAX_CHECK(absmax.dtype() == DType::F32 && absmax.numel() == blocks, "dequantize_nf4: ", n,
               " elements in blocks of ", block, " need float32 absmax of ", blocks,
               " elements, got ", absmax.str());
}

}  // namespace gemmax

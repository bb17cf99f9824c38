// The quantised-weight ops of the op layer, compiled for the GPU.
#include "gemmax/backend/cuda/cuda_platform.cuh"
#include "gemmax/backend/cuda/ops/ops.h"
#include "gemmax/backend/cuda/ops/quantize_ops.h"

namespace gemmax::cuda::ops {

GEMMAX_QUANTIZE_OPS(GEMMAX_CUDA_OP_INSTANTIATE)

}  // namespace gemmax::cuda::ops

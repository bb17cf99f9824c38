// The GeGLU ops of the op layer, compiled for the GPU.
#include "gemmax/backend/cuda/cuda_platform.cuh"
#include "gemmax/backend/cuda/ops/geglu_ops.h"
#include "gemmax/backend/cuda/ops/ops.h"

namespace gemmax::cuda::ops {

GEMMAX_GEGLU_OPS(GEMMAX_CUDA_OP_INSTANTIATE)

}  // namespace gemmax::cuda::ops

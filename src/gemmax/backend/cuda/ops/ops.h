// The op layer's functions (definitions: the *_ops.h headers beside this one), one per Backend
// op but matmul (the platform's) and the vocabulary-parallel loss (not implemented), templated on
// the platform that runs the kernels (ops/common.h).
#pragma once

#include "gemmax/backend/backend.h"

// One op family per file: cuda_<family>.cu instantiates GEMMAX_<FAMILY>_OPS for the GPU.
#define GEMMAX_CUDA_OPS(X)  \
  GEMMAX_ELEMENTWISE_OPS(X) \
  GEMMAX_EMBEDDING_OPS(X)   \
  GEMMAX_OPTIMIZER_OPS(X)   \
  GEMMAX_NORM_ROPE_OPS(X)   \
  GEMMAX_GEGLU_OPS(X)       \
  GEMMAX_ATTENTION_OPS(X)   \
  GEMMAX_MOE_OPS(X)         \
  GEMMAX_GMM_OPS(X)         \
  GEMMAX_LOSS_OPS(X)        \
  GEMMAX_QUANTIZE_OPS(X)

namespace gemmax::cuda::ops {

#define GEMMAX_CUDA_OP_DECLARE(name, Args, family) \
  template <class P>                               \
  void name(P& p, const Args& args, OpDims<Args> dims);
GEMMAX_CUDA_OPS(GEMMAX_CUDA_OP_DECLARE)
#undef GEMMAX_CUDA_OP_DECLARE

// In a cuda_*.cu: the instantiation of an op for the GPU.
#define GEMMAX_CUDA_OP_INSTANTIATE(name, Args, family) \
  template void name<CudaPlatform>(CudaPlatform & p, const Args& args, OpDims<Args> dims);

}  // namespace gemmax::cuda::ops

// The loss ops of the op layer, compiled for the GPU.
#include "gemmax/backend/cuda/cuda_platform.cuh"
#include "gemmax/backend/cuda/ops/loss_ops.h"

namespace gemmax::cuda::ops {

template void softcap_cross_entropy<CudaPlatform>(CudaPlatform& p, const Tensor& logits,
                                                  const Tensor& loss, const Tensor& targets,
                                                  const Tensor& mask, double cap, double grad_scale,
                                                  bool write_grad);

}  // namespace gemmax::cuda::ops

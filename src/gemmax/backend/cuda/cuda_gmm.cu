// The gmm ops of the op layer, compiled for the GPU.
#include "gemmax/backend/cuda/cuda_platform.cuh"
#include "gemmax/backend/cuda/ops/gmm_ops.h"

namespace gemmax::cuda::ops {

template void gmm<CudaPlatform>(CudaPlatform& p, const Tensor& out, const Tensor& lhs,
                                const Tensor& rhs, const Tensor& group_sizes, const GmmRows& rows);
template void gmm_dlhs<CudaPlatform>(CudaPlatform& p, const Tensor& dlhs, const Tensor& dout,
                                     const Tensor& rhs, const Tensor& group_sizes,
                                     const GmmRows& rows);
template void gmm_drhs<CudaPlatform>(CudaPlatform& p, const Tensor& drhs, const Tensor& lhs,
                                     const Tensor& dout, const Tensor& group_sizes,
                                     const GmmRows& rows);

}  // namespace gemmax::cuda::ops

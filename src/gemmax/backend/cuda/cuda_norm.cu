// The norm ops of the op layer, compiled for the GPU.
#include "gemmax/backend/cuda/cuda_platform.cuh"
#include "gemmax/backend/cuda/ops/norm_ops.h"

namespace gemmax::cuda::ops {

template void rmsnorm_forward<CudaPlatform>(CudaPlatform& p, const Tensor& y, const Tensor& rstd,
                                            const Tensor& x, const Tensor& w, double eps,
                                            double out_scale, const Tensor& residual,
                                            bool round_before_scale);
template void rmsnorm_backward<CudaPlatform>(CudaPlatform& p, const Tensor& dx, const Tensor& dw,
                                             const Tensor& dy, const Tensor& x, const Tensor& w,
                                             const Tensor& rstd, double out_scale,
                                             bool accumulate_dx);
template void rope_table<CudaPlatform>(CudaPlatform& p, const Tensor& table, const Tensor& positions,
                                        const Tensor& inv_freq);
template void rope<CudaPlatform>(CudaPlatform& p, const Tensor& x, const Tensor& table, bool inverse);
template void geglu_forward<CudaPlatform>(CudaPlatform& p, const Tensor& a, const Tensor& h,
                                          const Tensor& up);
template void geglu_backward<CudaPlatform>(CudaPlatform& p, const Tensor& dh, const Tensor& dup,
                                           const Tensor& da, const Tensor& h, const Tensor& up);

}  // namespace gemmax::cuda::ops

// The elementwise ops of the op layer, compiled for the GPU.
#include "gemmax/backend/cuda/cuda_platform.cuh"
#include "gemmax/backend/cuda/ops/elementwise_ops.h"

namespace gemmax::cuda::ops {

template void fill<CudaPlatform>(CudaPlatform& p, const Tensor& x, double value);
template void copy<CudaPlatform>(CudaPlatform& p, const Tensor& dst, const Tensor& src);
template void add<CudaPlatform>(CudaPlatform& p, const Tensor& out, const Tensor& a,
                                const Tensor& b);
template void axpy<CudaPlatform>(CudaPlatform& p, const Tensor& y, double alpha, const Tensor& x);
template void scale<CudaPlatform>(CudaPlatform& p, const Tensor& x, double alpha);
template void sum_squares<CudaPlatform>(CudaPlatform& p, const Tensor& sum, const Tensor& x);
template void scaled_sum_forward<CudaPlatform>(CudaPlatform& p, const Tensor& y, const Tensor& a,
                                               const Tensor& b, const Tensor& s);
template void scaled_sum_backward<CudaPlatform>(CudaPlatform& p, const Tensor& dab,
                                                const Tensor& ds, const Tensor& dy, const Tensor& a,
                                                const Tensor& b, const Tensor& s);
template void transpose_groups<CudaPlatform>(CudaPlatform& p, const Tensor& out, const Tensor& in);
template void embedding_forward<CudaPlatform>(CudaPlatform& p, const Tensor& x,
                                              const Tensor& tokens, const Tensor& table,
                                              double scale);
template void embedding_backward<CudaPlatform>(CudaPlatform& p, const Tensor& dtable,
                                               const Tensor& dx, const Tensor& tokens,
                                               double scale);
template void adamw_step<CudaPlatform>(CudaPlatform& p, const Tensor& param, const Tensor& grad,
                                       const Tensor& m, const Tensor& v, const AdamWStep& step,
                                       const Tensor& scalars);

}  // namespace gemmax::cuda::ops

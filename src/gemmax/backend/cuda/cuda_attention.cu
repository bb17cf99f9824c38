// The attention ops of the op layer, compiled for the GPU.
#include "gemmax/backend/cuda/cuda_platform.cuh"
#include "gemmax/backend/cuda/ops/attention_ops.h"

namespace gemmax::cuda::ops {

template void attention_forward<CudaPlatform>(CudaPlatform& p, const Tensor& o, const Tensor& lse,
                                              const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& seg, const AttentionShape& s);
template void attention_backward<CudaPlatform>(CudaPlatform& p, const Tensor& dq, const Tensor& dk,
                                               const Tensor& dv, const Tensor& dout,
                                               const Tensor& q, const Tensor& k, const Tensor& v,
                                               const Tensor& o, const Tensor& lse,
                                               const Tensor& seg, const AttentionShape& s);
template void attention_decode<CudaPlatform>(CudaPlatform& p, const Tensor& o, const Tensor& q,
                                             const Tensor& q_pos, const Tensor& k, const Tensor& v,
                                             const Tensor& kv_pos, int64_t window);

}  // namespace gemmax::cuda::ops

// The moe ops of the op layer, compiled for the GPU.
#include "gemmax/backend/cuda/cuda_platform.cuh"
#include "gemmax/backend/cuda/ops/moe_ops.h"

namespace gemmax::cuda::ops {

template void router_forward<CudaPlatform>(CudaPlatform& p, const Tensor& probs, const Tensor& idx,
                                           const Tensor& weights, const Tensor& logits,
                                           const Tensor& scale, bool renormalize);
template void router_backward<CudaPlatform>(CudaPlatform& p, const Tensor& dlogits,
                                            const Tensor& dscale, const Tensor& dweights,
                                            const Tensor& probs, const Tensor& idx,
                                            const Tensor& scale, bool renormalize,
                                            const Tensor& lb_dprobs, int64_t seq);
template void load_balance_forward<CudaPlatform>(CudaPlatform& p, const Tensor& density,
                                                 const Tensor& loss, const Tensor& probs,
                                                 const Tensor& idx, int64_t seq,
                                                 double coefficient);
template void route_sort<CudaPlatform>(CudaPlatform& p, const Routing& r, const Tensor& idx,
                                       int64_t num_experts);
template void permute<CudaPlatform>(CudaPlatform& p, const Tensor& xs, const Tensor& x,
                                    const Tensor& order, int64_t k);
template void permute_backward<CudaPlatform>(CudaPlatform& p, const Tensor& dx, const Tensor& dxs,
                                             const Tensor& inverse, int64_t k, bool accumulate);
template void combine_forward<CudaPlatform>(CudaPlatform& p, const Tensor& m, const Tensor& y,
                                            const Tensor& inverse, const Tensor& weights);
template void combine_backward<CudaPlatform>(CudaPlatform& p, const Tensor& dy,
                                             const Tensor& dweights, const Tensor& dm,
                                             const Tensor& y, const Tensor& order,
                                             const Tensor& weights);

}  // namespace gemmax::cuda::ops

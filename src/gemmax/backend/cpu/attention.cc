// Blocked attention (placeholder: the reference loops until the blocked kernels land).
#include "gemmax/backend/cpu/cpu_backend.h"

namespace gemmax {

void CpuBackend::attention_forward(const Tensor& o, const Tensor& lse, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const Tensor& segment_ids,
                                   const AttentionShape& shape) {
  reference_.attention_forward(o, lse, q, k, v, segment_ids, shape);
}

void CpuBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& o, const Tensor& lse,
                                    const Tensor& segment_ids, const AttentionShape& shape) {
  reference_.attention_backward(dq, dk, dv, dout, q, k, v, o, lse, segment_ids, shape);
}

}  // namespace gemmax

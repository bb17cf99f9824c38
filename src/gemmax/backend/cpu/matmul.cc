// Dense matmuls on the product engine (gemm.h).
#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"

namespace gemmax {
using namespace cpu;

void CpuBackend::do_matmul(const MatmulArgs& args, NoDims) {
  const auto& [c, a, trans_a, b, trans_b, accumulate] = args;
  if (!fast_dtypes({&a, &b, &c}) || (trans_a && trans_b)) return reference_.do_matmul(args, {});
  const int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  const int64_t N = trans_b ? b.dim(0) : b.dim(1);
  if (trans_a && c.dtype() == DType::BF16 && K > 8192)  // long reductions into bf16: rare
    return reference_.do_matmul(args, {});
  dispatch2<float, bf16>(a, c, "matmul", [&]<class T, class TC>() {
    if (trans_a) {  // c [M, N] = a^T b: a [K, M], b [K, N] by rows, reduced over K
      gemm_tn<T, TC>(isa_, M, N, K, Rows<const T>{a.data<T>(), M}, Rows<const T>{b.data<T>(), N},
                     c.data<TC>(), N, accumulate, gemm_);
    } else {
      gemm<T, TC>(isa_, M, N, K, Rows<const T>{a.data<T>(), K},
                  BMatrix<T>{b.data<T>(), trans_b ? K : N, trans_b}, Rows<TC>{c.data<TC>(), N},
                  accumulate, gemm_);
    }
  });
}

}  // namespace gemmax

// The grouped matmul's forward on Hopper's TMA, mbarrier and wgmma (kernels/gmm_sm90.h), taken
// by bfloat16 runs with cuda_gmm=sm90 where the tensor-core kernels apply; dlhs and drhs keep
// the mma.sync kernels.
#pragma once

#include <type_traits>

#include "gemmax/backend/cuda/kernels/gmm_sm90.h"
#include "gemmax/backend/cuda/ops/gmm_fast_ops.h"

namespace gemmax::cuda::ops {

template <class E, class P>
bool gmm_sm90(P& p, const Tensor& out, const Tensor& lhs, const Tensor& rhs,
              const kern::GmmArgs& a) {
  if constexpr (!std::is_same_v<E, bf16>) {
    return false;
  } else {
    if (!p.sm90_gmm() ||
        !gmm_mma_applies(p, "gmm", a, {{"out", &out}, {"lhs", &lhs}, {"rhs", &rhs}}))
      return false;
    using M = kern::GmmSm90;
    kern::GmmSm90Params q{};
    q.out = ptr<bf16>(out);
    q.lhs = ptr<bf16>(lhs);
    const int64_t weight_rows = rhs.dim(0) * rhs.dim(1);
    const char* bad = kern::make_tensor_map_2d(&q.weights, ptr<bf16>(rhs), 2, a.k, weight_rows,
                                               a.k * 2, M::BK, M::BN, kern::Swizzle::k128B);
    GEMMAX_CHECK(!bad, "gmm with cuda_gmm=sm90: the tensor map of ", rhs.str(), ": ", bad);
    GEMMAX_CHECK(weight_rows + M::BN < (int64_t(1) << 31), "gmm with cuda_gmm=sm90: ", rhs.str(),
                 " has more weight rows than a TMA coordinate reaches (2^31): cuda_gmm=mma");
    p.encode_tensor_map(q.weights);
    q.a = with_group_table(p, a, M::BM);
    Launch l =
        gmm_mma_launch(kern::ceil_div(a.n, M::BN), kern::gmm_max_row_tiles(a.m, a.G, M::BM), 1);
    l.threads = M::kThreads;
    l.smem = M::smem_bytes();
    p.template launch<kern::GmmForwardSm90Kernel>(l, q);
    return true;
  }
}

}  // namespace gemmax::cuda::ops

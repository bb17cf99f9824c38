// The tensor-core grouped matmuls of bfloat16 runs (kernels/gmm_mma.h). Each returns false when
// it does not apply (another dtype, fast kernels off, row lengths not a multiple of 8 or
// operands not 16-byte aligned) and the caller runs the plain kernels.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "gemmax/backend/cuda/kernels/gmm_mma.h"
#include "gemmax/backend/cuda/ops/common.h"

namespace gemmax::cuda::ops {

inline bool gmm_mma_applies(bool fast, const kern::GmmArgs& a,
                            std::initializer_list<const Tensor*> operands) {
  if (!fast || a.k % 8 != 0 || a.n % 8 != 0) return false;
  for (const Tensor* t : operands)
    if (reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0) return false;
  return true;
}

inline Launch gmm_mma_launch(uint32_t gx, uint32_t gy, uint32_t gz, int64_t G) {
  Launch l;
  l.gx = gx;
  l.gy = gy;
  l.gz = gz;
  l.threads = kern::GmmMma::kThreads;
  l.smem = kern::GmmMma::smem_bytes(G);
  return l;
}

template <class E, class P>
bool gmm_fast(P& p, const Tensor& out, const Tensor& lhs, const Tensor& rhs,
              const kern::GmmArgs& a) {
  if constexpr (!std::is_same_v<E, bf16s>) {
    return false;
  } else {
    if (!gmm_mma_applies(p.fast_kernels(), a, {&out, &lhs, &rhs})) return false;
    using M = kern::GmmMma;
    p.template launch<kern::GmmForwardMmaKernel>(
        gmm_mma_launch(uint32_t(kern::gmm_max_row_tiles(a.m, a.G, M::BM)),
                       uint32_t(kern::ceil_div(a.n, M::BN)), 1, a.G),
        ptr<bf16s>(out), (const bf16s*)ptr<bf16s>(lhs), (const bf16s*)ptr<bf16s>(rhs), a);
    return true;
  }
}

template <class E, class P>
bool gmm_dlhs_fast(P& p, const Tensor& dlhs, const Tensor& dout, const Tensor& rhs,
                   const kern::GmmArgs& a) {
  if constexpr (!std::is_same_v<E, bf16s>) {
    return false;
  } else {
    if (!gmm_mma_applies(p.fast_kernels(), a, {&dlhs, &dout, &rhs})) return false;
    using M = kern::GmmMma;
    p.template launch<kern::GmmDlhsMmaKernel>(
        gmm_mma_launch(uint32_t(kern::gmm_max_row_tiles(a.m, a.G, M::BM)),
                       uint32_t(kern::ceil_div(a.k, M::BN)), 1, a.G),
        ptr<bf16s>(dlhs), (const bf16s*)ptr<bf16s>(dout), (const bf16s*)ptr<bf16s>(rhs), a);
    return true;
  }
}

template <class E, class TC, class P>
bool gmm_drhs_fast(P& p, const Tensor& drhs, const Tensor& lhs, const Tensor& dout,
                   const kern::GmmArgs& a) {
  if constexpr (!std::is_same_v<E, bf16s> || std::is_same_v<TC, double>) {
    return false;
  } else {
    if (!gmm_mma_applies(p.fast_kernels(), a, {&lhs, &dout})) return false;
    using M = kern::GmmMma;
    p.template launch<kern::GmmDrhsMmaKernel>(
        gmm_mma_launch(uint32_t(kern::ceil_div(a.k, M::BN)), uint32_t(kern::ceil_div(a.n, M::BM)),
                       uint32_t(a.G), a.G),
        ptr<TC>(drhs), (const bf16s*)ptr<bf16s>(lhs), (const bf16s*)ptr<bf16s>(dout), a);
    return true;
  }
}

}  // namespace gemmax::cuda::ops

// The grouped matmuls on Hopper's TMA, mbarrier and wgmma (kernels/gmm_sm90.h, the forward;
// kernels/gmm_sm90_bwd.h, dlhs and drhs): the launches of GmmPath::kSm90, which bfloat16 runs
// with cuda_gmm=sm90 take where the tensor-core kernels apply (gmm_path).
#pragma once

#include "gemmax/backend/cuda/kernels/gmm_sm90.h"
#include "gemmax/backend/cuda/kernels/gmm_sm90_bwd.h"
#include "gemmax/backend/cuda/ops/gmm_fast_ops.h"

namespace gemmax::cuda::ops {

template <class P>
void gmm_sm90(P& p, const Tensor& out, const Tensor& lhs, const Tensor& rhs,
              const kern::GmmArgs& a) {
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
}

// A tensor map over the [rows, cols] bfloat16 `t` in the backward kernels' boxes of 64 x 64.
template <class P>
void sm90_box_map(P& p, kern::TensorMap2d& map, const Tensor& t, int64_t cols, int64_t rows,
                  const char* op) {
  const char* bad = kern::make_tensor_map_2d(&map, t.raw(), 2, cols, rows, cols * 2, 64,
                                             kern::GmmSm90::BK, kern::Swizzle::k128B);
  GEMMAX_CHECK(!bad, op, " with cuda_gmm=sm90: the tensor map of ", t.str(), ": ", bad);
  GEMMAX_CHECK(rows + 64 < (int64_t(1) << 31), op, " with cuda_gmm=sm90: ", t.str(),
               " has more rows than a TMA coordinate reaches (2^31): cuda_gmm=mma");
  p.encode_tensor_map(map);
}

template <class P>
void gmm_dlhs_sm90(P& p, const Tensor& dlhs, const Tensor& dout, const Tensor& rhs,
                   const kern::GmmArgs& a) {
  using M = kern::GmmSm90;
  kern::GmmDlhsSm90Params q{};
  q.dlhs = ptr<bf16>(dlhs);
  q.dout = ptr<bf16>(dout);
  sm90_box_map(p, q.weights, rhs, a.k, rhs.dim(0) * rhs.dim(1), "gmm_dlhs");
  if (!a.out_map) sm90_box_map(p, q.douts, dout, a.n, dout.dim(0), "gmm_dlhs");
  q.a = with_group_table(p, a, M::BM);
  Launch l =
      gmm_mma_launch(kern::ceil_div(a.k, M::BN), kern::gmm_max_row_tiles(a.m, a.G, M::BM), 1);
  l.threads = M::kThreads;
  l.smem = M::smem_bytes();
  p.template launch<kern::GmmDlhsSm90Kernel>(l, q);
}

// drhs of TC: bfloat16 or float32.
template <class TC, class P>
void gmm_drhs_sm90(P& p, const Tensor& drhs, const Tensor& lhs, const Tensor& dout,
                   const kern::GmmArgs& a) {
  using M = kern::GmmSm90;
  kern::GmmDrhsSm90Params<TC> q{};
  q.drhs = ptr<TC>(drhs);
  q.lhs = ptr<bf16>(lhs);
  q.dout = ptr<bf16>(dout);
  if (!a.in_map) sm90_box_map(p, q.lhss, lhs, a.k, lhs.dim(0), "gmm_drhs");
  if (!a.out_map) sm90_box_map(p, q.douts, dout, a.n, dout.dim(0), "gmm_drhs");
  q.a = with_group_table(p, a, M::BM);
  Launch l = gmm_mma_launch(kern::ceil_div(a.k, M::BN), kern::ceil_div(a.n, M::BM), a.G);
  l.threads = M::kThreads;
  l.smem = M::smem_bytes();
  p.template launch<kern::GmmDrhsSm90Kernel>(l, q);
}

}  // namespace gemmax::cuda::ops

// Grouped matmuls over the expert-sorted rows, with row maps and weight windows (GmmRows). The
// group sizes stay on the device: the grid covers the most row tiles any split can have.
#pragma once

#include "gemmax/backend/cuda/kernels/gmm_simple.h"
#include "gemmax/backend/cuda/ops/common.h"
#include "gemmax/backend/cuda/ops/gmm_fast_ops.h"
#include "gemmax/backend/cuda/ops/gmm_sm90_ops.h"

namespace gemmax::cuda::ops {

inline kern::GmmArgs gmm_args(const GmmRows& rows, const Tensor& group_sizes, int64_t m, int64_t k,
                              int64_t N, int64_t in_rows, int64_t out_rows, kern::DeviceError* err,
                              int32_t op, const char* name) {
  kern::GmmArgs a{};
  a.group_sizes = ptr<int32_t>(group_sizes);
  a.G = group_sizes.numel();
  a.m = m;
  a.k = k;
  a.N = N;
  a.w0 = rows.weight_begin;
  a.n = rows.weight_rows < 0 ? N - rows.weight_begin : rows.weight_rows;
  GEMMAX_CHECK(a.G <= 4096, "cuda backend: ", name, " over ", a.G, " groups (at most 4096)");
  a.in_map = ptr<int32_t>(rows.in);
  a.out_map = ptr<int32_t>(rows.out);
  a.in_rows = in_rows;
  a.out_rows = out_rows;
  a.accumulate = rows.accumulate;
  a.err = err;
  a.op = op;
  return a;
}

template <class P>
void gmm(P& p, const GmmArgs& args, NoDims) {
  const auto& [out, lhs, rhs, group_sizes, rows] = args;
  const int64_t k = lhs.dim(1), G = rhs.dim(0), N = rhs.dim(1), m = out.dim(0);
  const kern::GmmArgs a =
      gmm_args(rows, group_sizes, m, k, N, lhs.dim(0), m, p.errors(), kern::kOpGmm, "gmm");
  if (m == 0 || a.n == 0) return;
  dispatch<float, bf16>(out, "gmm", [&]<class E>() {
    if (gmm_sm90<E>(p, out, lhs, rhs, a) || gmm_fast<E>(p, out, lhs, rhs, a)) return;
    using K = kern::GmmForwardSimpleKernel;
    Launch l;
    l.gx = uint32_t(kern::gmm_max_row_tiles(m, G, kern::GmmSimple::kTile));
    l.gy = uint32_t(kern::ceil_div(a.n, kern::GmmSimple::kTile));
    l.threads = kern::GmmSimple::kThreads;
    l.smem = kern::GmmSimple::smem_bytes(G);
    p.template launch<K>(l, ptr<E>(out), (const E*)ptr<E>(lhs), (const E*)ptr<E>(rhs), a);
  });
}

template <class P>
void gmm_dlhs(P& p, const GmmDlhsArgs& args, NoDims) {
  const auto& [dlhs, dout, rhs, group_sizes, rows] = args;
  const int64_t k = rhs.dim(2), G = rhs.dim(0), N = rhs.dim(1), m = dlhs.dim(0);
  const kern::GmmArgs a = gmm_args(rows, group_sizes, m, k, N, m, dout.dim(0), p.errors(),
                                   kern::kOpGmmDlhs, "gmm_dlhs");
  if (m == 0 || k == 0) return;
  dispatch<float, bf16>(dlhs, "gmm_dlhs", [&]<class E>() {
    if (gmm_dlhs_sm90<E>(p, dlhs, dout, rhs, a) || gmm_dlhs_fast<E>(p, dlhs, dout, rhs, a))
      return;
    using K = kern::GmmDlhsSimpleKernel;
    Launch l;
    l.gx = uint32_t(kern::gmm_max_row_tiles(m, G, kern::GmmSimple::kTile));
    l.gy = uint32_t(kern::ceil_div(k, kern::GmmSimple::kTile));
    l.threads = kern::GmmSimple::kThreads;
    l.smem = kern::GmmSimple::smem_bytes(G);
    p.template launch<K>(l, ptr<E>(dlhs), (const E*)ptr<E>(dout), (const E*)ptr<E>(rhs), a);
  });
}

template <class P>
void gmm_drhs(P& p, const GmmDrhsArgs& args, NoDims) {
  const auto& [drhs, lhs, dout, group_sizes, rows] = args;
  const int64_t k = lhs.dim(1), G = drhs.dim(0), N = drhs.dim(1);
  const int64_t m = rows.in.defined() ? rows.in.numel() : lhs.dim(0);
  const kern::GmmArgs a = gmm_args(rows, group_sizes, m, k, N, lhs.dim(0), dout.dim(0), p.errors(),
                                   kern::kOpGmmDrhs, "gmm_drhs");
  GEMMAX_CHECK(G <= 65535, "gmm_drhs: ", G, " groups");
  if (m == 0 || k == 0 || a.n == 0) return;
  dispatch<float, bf16>(lhs, "gmm_drhs", [&]<class E>() {
    dispatch<float, bf16, double>(drhs, "gmm_drhs", [&]<class TC>() {
      if (gmm_drhs_sm90<E, TC>(p, drhs, lhs, dout, a) ||
          gmm_drhs_fast<E, TC>(p, drhs, lhs, dout, a))
        return;
      using K = kern::GmmDrhsSimpleKernel;
      Launch l;
      l.gx = uint32_t(kern::ceil_div(k, kern::GmmSimple::kTile));
      l.gy = uint32_t(kern::ceil_div(a.n, kern::GmmSimple::kTile));
      l.gz = uint32_t(G);
      l.threads = kern::GmmSimple::kThreads;
      l.smem = kern::GmmSimple::smem_bytes(G);
      p.template launch<K>(l, ptr<TC>(drhs), (const E*)ptr<E>(lhs), (const E*)ptr<E>(dout), a);
    });
  });
}

}  // namespace gemmax::cuda::ops

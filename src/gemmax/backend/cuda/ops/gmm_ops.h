// Grouped matmuls over the expert-sorted rows, with row maps and weight windows (GmmRows). The
// group sizes stay on the device: the grid covers the most row tiles any split can have. Each
// call takes one path (gmm_path): the sm90 kernels, the mma.sync ones or the plain ones here.
#pragma once

#include "gemmax/backend/cuda/kernels/gmm_simple.h"
#include "gemmax/backend/cuda/ops/common.h"
#include "gemmax/backend/cuda/ops/gmm_fast_ops.h"
#include "gemmax/backend/cuda/ops/gmm_sm90_ops.h"

namespace gemmax::cuda::ops {

inline kern::GmmArgs gmm_args(const GmmRows& rows, const Tensor& group_sizes, const GmmDims& d,
                              kern::DeviceError* err, int32_t op, const char* name) {
  kern::GmmArgs a{};
  a.group_sizes = ptr<int32_t>(group_sizes);
  a.G = d.G;
  a.m = d.m;
  a.k = d.k;
  a.N = d.N;
  a.w0 = d.w0;
  a.n = d.n;
  GEMMAX_CHECK(a.G <= 4096, "cuda backend: ", name, " over ", a.G, " groups (at most 4096)");
  a.in_map = ptr<int32_t>(rows.in);
  a.out_map = ptr<int32_t>(rows.out);
  a.in_rows = d.in_rows;
  a.out_rows = d.out_rows;
  a.accumulate = rows.accumulate;
  a.err = err;
  a.op = op;
  return a;
}

template <class P>
void gmm(P& p, const GmmArgs& args, GmmDims d) {
  const auto& [out, lhs, rhs, group_sizes, rows] = args;
  const kern::GmmArgs a = gmm_args(rows, group_sizes, d, p.errors(), kern::kOpGmm, "gmm");
  if (d.m == 0 || d.n == 0) return;
  dispatch<float, bf16>(out, "gmm", [&]<class E>() {
    if constexpr (kGmmTensorCoreTypes<E>) {
      switch (gmm_path(p, args, a)) {
        case GmmPath::kSm90:
          return gmm_sm90(p, out, lhs, rhs, a);
        case GmmPath::kMma:
          return gmm_fast(p, out, lhs, rhs, a);
        case GmmPath::kPlain:
          break;
      }
    }
    using K = kern::GmmForwardSimpleKernel;
    Launch l;
    l.gx = uint32_t(kern::gmm_max_row_tiles(d.m, d.G, kern::GmmSimple::kTile));
    l.gy = uint32_t(kern::ceil_div(d.n, kern::GmmSimple::kTile));
    l.threads = kern::GmmSimple::kThreads;
    l.smem = kern::GmmSimple::smem_bytes(d.G);
    p.template launch<K>(l, ptr<E>(out), (const E*)ptr<E>(lhs), (const E*)ptr<E>(rhs), a);
  });
}

template <class P>
void gmm_dlhs(P& p, const GmmDlhsArgs& args, GmmDims d) {
  const auto& [dlhs, dout, rhs, group_sizes, rows] = args;
  const kern::GmmArgs a = gmm_args(rows, group_sizes, d, p.errors(), kern::kOpGmmDlhs, "gmm_dlhs");
  if (d.m == 0 || d.k == 0) return;
  dispatch<float, bf16>(dlhs, "gmm_dlhs", [&]<class E>() {
    if constexpr (kGmmTensorCoreTypes<E>) {
      switch (gmm_path(p, args, a)) {
        case GmmPath::kSm90:
          return gmm_dlhs_sm90(p, dlhs, dout, rhs, a);
        case GmmPath::kMma:
          return gmm_dlhs_fast(p, dlhs, dout, rhs, a);
        case GmmPath::kPlain:
          break;
      }
    }
    using K = kern::GmmDlhsSimpleKernel;
    Launch l;
    l.gx = uint32_t(kern::gmm_max_row_tiles(d.m, d.G, kern::GmmSimple::kTile));
    l.gy = uint32_t(kern::ceil_div(d.k, kern::GmmSimple::kTile));
    l.threads = kern::GmmSimple::kThreads;
    l.smem = kern::GmmSimple::smem_bytes(d.G);
    p.template launch<K>(l, ptr<E>(dlhs), (const E*)ptr<E>(dout), (const E*)ptr<E>(rhs), a);
  });
}

template <class P>
void gmm_drhs(P& p, const GmmDrhsArgs& args, GmmDims d) {
  const auto& [drhs, lhs, dout, group_sizes, rows] = args;
  const kern::GmmArgs a = gmm_args(rows, group_sizes, d, p.errors(), kern::kOpGmmDrhs, "gmm_drhs");
  GEMMAX_CHECK(d.G <= 65535, "gmm_drhs: ", d.G, " groups");
  if (d.m == 0 || d.k == 0 || d.n == 0) return;
  dispatch<float, bf16>(lhs, "gmm_drhs", [&]<class E>() {
    dispatch<float, bf16, double>(drhs, "gmm_drhs", [&]<class TC>() {
      if constexpr (kGmmTensorCoreTypes<E, TC>) {
        switch (gmm_path(p, args, a)) {
          case GmmPath::kSm90:
            return gmm_drhs_sm90<TC>(p, drhs, lhs, dout, a);
          case GmmPath::kMma:
            return gmm_drhs_fast<TC>(p, drhs, lhs, dout, a);
          case GmmPath::kPlain:
            break;
        }
      }
      using K = kern::GmmDrhsSimpleKernel;
      Launch l;
      l.gx = uint32_t(kern::ceil_div(d.k, kern::GmmSimple::kTile));
      l.gy = uint32_t(kern::ceil_div(d.n, kern::GmmSimple::kTile));
      l.gz = uint32_t(d.G);
      l.threads = kern::GmmSimple::kThreads;
      l.smem = kern::GmmSimple::smem_bytes(d.G);
      p.template launch<K>(l, ptr<TC>(drhs), (const E*)ptr<E>(lhs), (const E*)ptr<E>(dout), a);
    });
  });
}

}  // namespace gemmax::cuda::ops

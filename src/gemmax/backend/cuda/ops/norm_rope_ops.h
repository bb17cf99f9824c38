// RMSNorm and RoPE ops.
#pragma once

#include "gemmax/backend/cuda/kernels/norm_rope.h"
#include "gemmax/backend/cuda/ops/common.h"

namespace gemmax::cuda::ops {

// Threads per row for rows of n elements (blocks of 256 threads).
inline int row_width(int64_t n) { return n <= 256 ? 32 : n <= 1024 ? 128 : 256; }
inline Launch rows_launch(int64_t rows, int width) {
  Launch l;
  l.threads = 256;
  const int64_t blocks = kern::ceil_div(rows, 256 / width);
  l.gx = uint32_t(blocks < 1 ? 1 : blocks > 16384 ? 16384 : blocks);
  l.smem = 8 * sizeof(float);
  return l;
}

template <class P>
void rmsnorm_forward(P& p, const RmsnormForwardArgs& args, NoDims) {
  const auto& [y, rstd, x, w, eps, out_scale, residual, round_before_scale] = args;
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  check_stat(rstd, "rmsnorm_forward");
  if (rows == 0) return;
  const kern::RmsNormForwardArgs a{rows, n, eps, out_scale, row_width(n), round_before_scale};
  dispatch<float, bf16>(x, "rmsnorm_forward", [&]<class E>() {
    const bool vec = vec_ok<E>(n, {&y, &x, &w, &residual});
    auto run = [&]<class W>(const W* wp) {
      p.template launch<kern::RmsNormForwardKernel>(rows_launch(rows, a.width), ptr<E>(y),
                                                    ptr<float>(rstd), (const E*)ptr<E>(x), wp,
                                                    (const E*)ptr<E>(residual), a, vec);
    };
    if (!w.defined())
      run((const float*)nullptr);
    else
      dispatch<float, bf16, double>(w, "rmsnorm_forward",
                                    [&]<class W>() { run((const W*)ptr<W>(w)); });
  });
}

template <class P>
void rmsnorm_backward(P& p, const RmsnormBackwardArgs& args, NoDims) {
  const auto& [dx, dw, dy, x, w, rstd, out_scale, accumulate_dx] = args;
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  check_stat(rstd, "rmsnorm_backward");
  if (rows == 0) return;
  const kern::RmsNormBackwardArgs a{rows, n, out_scale, row_width(n), accumulate_dx};
  dispatch<float, bf16>(x, "rmsnorm_backward", [&]<class E>() {
    const bool vec = vec_ok<E>(n, {&dx, &dy, &x, &w});
    auto run = [&]<class W>(const W* wp) {
      p.template launch<kern::RmsNormBackwardKernel>(rows_launch(rows, a.width), ptr<E>(dx),
                                                     (const E*)ptr<E>(dy), (const E*)ptr<E>(x), wp,
                                                     (const float*)ptr<float>(rstd), a, vec);
    };
    if (!w.defined())
      run((const float*)nullptr);
    else
      dispatch<float, bf16, double>(w, "rmsnorm_backward",
                                    [&]<class W>() { run((const W*)ptr<W>(w)); });
    if (!dw.defined()) return;
    // dw: column sums over chunks of rows, then the chunks in order.
    Scratch s = p.scratch();
    int64_t chunks = kern::kmin<int64_t>(128, kern::ceil_div(rows, 64));
    while (chunks > 1 && size_t(chunks * n) * 4 > s.left()) chunks /= 2;
    float* partial = s.take<float>(chunks * n, "the column sums of rmsnorm_backward");
    const bool vec_dw = vec_ok<E>(n, {&dy, &x});  // the scratch is 16-byte aligned
    Launch l;
    l.gx = uint32_t(kern::ceil_div(n, 256 * (vec_dw ? kern::kVec<E> : 1)));
    l.gy = uint32_t(chunks);
    l.threads = 256;
    p.template launch<kern::RmsNormDwKernel>(l, partial, (const E*)ptr<E>(dy), (const E*)ptr<E>(x),
                                             (const float*)ptr<float>(rstd), rows, n,
                                             kern::ceil_div(rows, chunks), vec_dw);
    dispatch<float, bf16, double>(dw, "rmsnorm_backward", [&]<class W>() {
      p.template launch<kern::AddColumnPartialsKernel>(stride_launch(n), ptr<W>(dw),
                                                       (const float*)partial, chunks, n, out_scale);
    });
  });
}

template <class P>
void rope_table(P& p, const RopeTableArgs& args, NoDims) {
  const auto& [table, positions, inv_freq] = args;
  const int64_t T = positions.numel(), half = inv_freq.numel();
  check_stat(table, "rope_table");
  if (table.numel() == 0) return;
  p.template launch<kern::RopeTableKernel>(stride_launch(T * half), ptr<float>(table),
                                           (const int32_t*)ptr<int32_t>(positions),
                                           (const double*)ptr<double>(inv_freq), T, half);
}

template <class P>
void rope(P& p, const RopeArgs& args, NoDims) {
  const auto& [x, table, inverse] = args;
  check_stat(table, "rope");
  const int64_t T = x.dim(0), heads = x.dim(1), half = x.dim(2) / 2;
  if (x.numel() == 0) return;
  dispatch<float, bf16>(x, "rope", [&]<class E>() {
    p.template launch<kern::RopeKernel>(stride_launch(T * heads * 32, 256, 65536), ptr<E>(x),
                                        (const float*)ptr<float>(table), T, heads, half, inverse);
  });
}

}  // namespace gemmax::cuda::ops

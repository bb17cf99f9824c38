// Elementwise ops, ordered sums, transpose and the stable sort (embedding, routing).
#pragma once

#include <cmath>

#include "gemmax/backend/cuda/kernels/elementwise.h"
#include "gemmax/backend/cuda/kernels/sort.h"
#include "gemmax/backend/cuda/ops/common.h"

namespace gemmax::cuda::ops {

template <class P>
void fill(P& p, const FillArgs& args, NoDims) {
  const auto& [x, value] = args;
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.dtype() == DType::I32) {
    p.template launch<kern::FillKernel>(stride_launch(n), ptr<int32_t>(x), n, int32_t(value));
    return;
  }
  dispatch<float, bf16, double>(x, "fill", [&]<class E>() {
    p.template launch<kern::FillKernel>(stride_launch(n), ptr<E>(x), n,
                                        kern::from_double<E>(value));
  });
}

template <class P>
void copy(P& p, const CopyArgs& args, NoDims) {
  const auto& [dst, src] = args;
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype()) {
    p.copy_bytes(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  dispatch<float, bf16, double>(dst, "copy", [&]<class D>() {
    dispatch<float, bf16, double>(src, "copy", [&]<class S>() {
      const bool vec = vec_ok<S>(kern::ConvertKernel::kChunk, {&dst, &src});
      p.template launch<kern::ConvertKernel>(
          stride_launch(vec ? src.numel() / kern::ConvertKernel::kChunk + 1 : src.numel()),
          ptr<D>(dst), const_cast<const S*>(ptr<S>(src)), src.numel(), vec);
    });
  });
}

template <class P>
void add(P& p, const AddArgs& args, NoDims) {
  const auto& [out, a, b] = args;
  dispatch<float, bf16, double>(out, "add", [&]<class E>() {
    p.template launch<kern::AddKernel>(stride_launch(out.numel()), ptr<E>(out),
                                       const_cast<const E*>(ptr<E>(a)),
                                       const_cast<const E*>(ptr<E>(b)), out.numel());
  });
}

template <class P>
void axpy(P& p, const AxpyArgs& args, NoDims) {
  const auto& [y, alpha, x] = args;
  dispatch<float, bf16, double>(y, "axpy", [&]<class E>() {
    p.template launch<kern::AxpyKernel>(stride_launch(y.numel()), ptr<E>(y), kern::acc_t<E>(alpha),
                                        const_cast<const E*>(ptr<E>(x)), y.numel());
  });
}

template <class P>
void scale(P& p, const ScaleArgs& args, NoDims) {
  const auto& [x, alpha] = args;
  dispatch<float, bf16, double>(x, "scale", [&]<class E>() {
    p.template launch<kern::ScaleKernel>(stride_launch(x.numel()), ptr<E>(x), kern::acc_t<E>(alpha),
                                         x.numel());
  });
}

template <class P>
void sum_squares(P& p, const SumSquaresArgs& args, NoDims) {
  const auto& [sum, x] = args;
  check_scalar(sum, "sum_squares");
  Scratch s = p.scratch();
  dispatch<float, bf16, double>(x, "sum_squares", [&]<class E>() {
    ordered_sum_into<P, kern::SumSquaresKernel>(p, s, ptr<double>(sum),
                                                const_cast<const E*>(ptr<E>(x)), x.numel());
  });
}

template <class P>
void scaled_sum_forward(P& p, const ScaledSumForwardArgs& args, NoDims) {
  const auto& [y, a, b, s] = args;
  dispatch<float, bf16, double>(y, "scaled_sum_forward", [&]<class E>() {
    dispatch<float, bf16, double>(s, "scaled_sum_forward", [&]<class S>() {
      p.template launch<kern::ScaledSumForwardKernel>(
          stride_launch(y.numel()), ptr<E>(y), const_cast<const E*>(ptr<E>(a)),
          const_cast<const E*>(ptr<E>(b)), const_cast<const S*>(ptr<S>(s)), y.numel());
    });
  });
}

template <class P>
void scaled_sum_backward(P& p, const ScaledSumBackwardArgs& args, NoDims) {
  const auto& [dab, ds, dy, a, b, s] = args;
  Scratch sc = p.scratch();
  dispatch<float, bf16, double>(dy, "scaled_sum_backward", [&]<class E>() {
    dispatch<float, bf16, double>(s, "scaled_sum_backward", [&]<class S>() {
      ordered_sum_into<P, kern::ScaledSumBackwardKernel>(
          p, sc, ptr<S>(ds), ptr<E>(dab), const_cast<const E*>(ptr<E>(dy)),
          const_cast<const E*>(ptr<E>(a)), const_cast<const E*>(ptr<E>(b)),
          const_cast<const S*>(ptr<S>(s)), dy.numel());
    });
  });
}

template <class P>
void dropout(P& p, const DropoutArgs& args, NoDims) {
  const auto& [y, x, prob, seed] = args;
  if (x.numel() == 0) return;
  const uint64_t threshold = dropout_threshold(prob);
  dispatch<float, bf16, double>(x, "dropout", [&]<class E>() {
    p.template launch<kern::DropoutKernel>(stride_launch(x.numel()), ptr<E>(y),
                                           const_cast<const E*>(ptr<E>(x)), x.numel(), seed,
                                           threshold, kern::acc_t<E>(1.0 / (1.0 - prob)));
  });
}

template <class P>
void transpose_groups(P& p, const TransposeGroupsArgs& args, NoDims) {
  const auto& [out, in] = args;
  const int64_t G = in.dim(0), R = in.dim(1), C = in.dim(2);
  if (in.numel() == 0) return;
  GEMMAX_CHECK(G <= 65535 && (R + 31) / 32 <= 65535, "transpose_groups: ", in.str(),
               " has too many groups or rows for one launch");
  dispatch<float, bf16, double>(in, "transpose_groups", [&]<class E>() {
    Launch l;
    l.gx = uint32_t((C + 31) / 32);
    l.gy = uint32_t((R + 31) / 32);
    l.gz = uint32_t(G);
    l.smem = 32 * 33 * sizeof(E);
    p.template launch<kern::TransposeKernel>(l, ptr<E>(out), const_cast<const E*>(ptr<E>(in)), R,
                                             C);
  });
}

// A stable sort of positions by key: `passes` radix passes of kern::kMaxBins bins, or one pass
// of `bins` bins on the raw keys (radix = false). Returns the sorted positions (in scratch or in
// `out`).
template <class P>
const int32_t* stable_sort(P& p, Scratch& s, const int32_t* keys, int64_t n, int bins, bool radix,
                           int passes, int32_t* out, int32_t* totals) {
  const int64_t chunks = kern::ceil_div(n, kern::kSortChunk);
  int32_t* hist = s.take<int32_t>(chunks * bins, "the histograms of a sort");
  int32_t* offsets = s.take<int32_t>(chunks * bins, "the offsets of a sort");
  int32_t* tmp = passes > 1 ? s.take<int32_t>(n, "a radix sort's buffer") : nullptr;
  const int32_t* perm = nullptr;
  int shift = 0;
  for (int pass = 0; pass < passes; ++pass) {
    // The last pass lands in `out`; earlier ones alternate so that it does.
    int32_t* dst = ((passes - 1 - pass) % 2 == 0) ? out : tmp;
    kern::SortPass sp{keys, perm, n, bins, radix ? shift : -1, p.errors()};
    Launch l;
    l.gx = uint32_t(chunks);
    l.threads = kern::kSortThreads;
    l.smem = size_t(bins) * 4;
    p.template launch<kern::SortHistogramKernel>(l, sp, hist);
    Launch one;
    one.threads = kern::kSortThreads;
    one.smem = size_t(bins) * 4;
    p.template launch<kern::SortOffsetsKernel>(one, const_cast<const int32_t*>(hist), int(chunks),
                                               bins, offsets,
                                               pass == passes - 1 ? totals : nullptr);
    l.smem = size_t(bins) * 4 * (1 + kern::kSortThreads / 32);
    p.template launch<kern::SortScatterKernel>(l, sp, const_cast<const int32_t*>(offsets), dst);
    perm = dst;
    shift += 9;
  }
  return perm;
}

}  // namespace gemmax::cuda::ops

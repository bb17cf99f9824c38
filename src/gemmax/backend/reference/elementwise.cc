// Memory, elementwise ops and reductions.
#include <cmath>
#include <cstring>

#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/dropout_mask.h"

namespace gemmax {
using ref::calc_t;
using ref::check_same;

Tensor ReferenceBackend::alloc(const Shape& shape, DType dtype, MemKind kind) {
  return Tensor::empty(shape, dtype, kind, tracker());
}

void ReferenceBackend::upload(const Tensor& dst, const Tensor& host) {
  GEMMAX_CHECK(dst.dtype() == host.dtype() && dst.numel() == host.numel(), "upload: ", host.str(),
               " into ", dst.str());
  std::memcpy(dst.raw(), host.raw(), host.nbytes());
}

void ReferenceBackend::do_fill(const FillArgs& args, NoDims) {
  const auto& [x, value] = args;
  if (value == 0.0) {
    std::memset(x.raw(), 0, x.nbytes());
    return;
  }
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) set_from_double(x, i, value);
}

void ReferenceBackend::do_copy(const CopyArgs& args, NoDims) {
  const auto& [dst, src] = args;
  if (dst.dtype() == src.dtype()) {
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  const int64_t n = src.numel();
  if (is_float(dst.dtype()) && is_float(src.dtype()) && dst.dtype() != DType::F16 &&
      src.dtype() != DType::F16) {
    // Float conversions (e.g. a layer's fp32 weights to their bf16 compute copy): one rounding.
    dispatch2<float, bf16, double>(dst, src, "copy", [&]<class D, class S>() {
      D* d = dst.data<D>();
      const S* s = src.data<S>();
#pragma omp parallel for if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) d[i] = D(double(s[i]));
    });
    return;
  }
  for (int64_t i = 0; i < n; ++i) set_from_double(dst, i, get_as_double(src, i));
}

void ReferenceBackend::do_add(const AddArgs& args, NoDims) {
  const auto& [out, a, b] = args;
  dispatch<float, bf16, double>(out, "add", [&]<class T>() {
    T* o = out.data<T>();
    const T *pa = a.data<T>(), *pb = b.data<T>();
    const int64_t n = out.numel();
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) o[i] = T(calc_t<T>(pa[i]) + calc_t<T>(pb[i]));
  });
}

void ReferenceBackend::do_axpy(const AxpyArgs& args, NoDims) {
  const auto& [y, alpha, x] = args;
  dispatch<float, bf16, double>(y, "axpy", [&]<class T>() {
    T* py = y.data<T>();
    const T* px = x.data<T>();
    const int64_t n = y.numel();
    const calc_t<T> a = calc_t<T>(alpha);
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) py[i] = T(calc_t<T>(py[i]) + a * calc_t<T>(px[i]));
  });
}

void ReferenceBackend::do_scale(const ScaleArgs& args, NoDims) {
  const auto& [x, alpha] = args;
  dispatch<float, bf16, double>(x, "scale", [&]<class T>() {
    T* p = x.data<T>();
    const int64_t n = x.numel();
    const calc_t<T> a = calc_t<T>(alpha);
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) p[i] = T(calc_t<T>(p[i]) * a);
  });
}

void ReferenceBackend::do_sum_squares(const SumSquaresArgs& args, NoDims) {
  const auto& [sum, x] = args;
  dispatch<float, bf16, double>(x, "sum_squares", [&]<class T>() {
    const T* p = x.data<T>();
    ref::add_to_scalar(
        sum, ref::ordered_sum(x.numel(), [&](int64_t i) { return double(p[i]) * double(p[i]); }));
  });
}

void ReferenceBackend::do_scaled_sum_forward(const ScaledSumForwardArgs& args, NoDims) {
  const auto& [y, a, b, s] = args;
  const double scale = get_as_double(s, 0);
  dispatch<float, bf16, double>(y, "scaled_sum_forward", [&]<class T>() {
    T* o = y.data<T>();
    const T *pa = a.data<T>(), *pb = b.data<T>();
    const int64_t n = y.numel();
    // The sum is rounded to the activation dtype first (as a separate add would), then scaled at
    // the scale's precision and rounded once.
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i)
      o[i] = T(double(T(calc_t<T>(pa[i]) + calc_t<T>(pb[i]))) * scale);
  });
}

void ReferenceBackend::do_scaled_sum_backward(const ScaledSumBackwardArgs& args, NoDims) {
  const auto& [dab, ds, dy, a, b, s] = args;
  const double scale = get_as_double(s, 0);
  dispatch<float, bf16, double>(dy, "scaled_sum_backward", [&]<class T>() {
    const T *pd = dy.data<T>(), *pa = a.data<T>(), *pb = b.data<T>();
    T* o = dab.data<T>();
    const int64_t n = dy.numel();
    const double dsum = ref::ordered_sum(n, [&](int64_t i) {
      return double(pd[i]) * double(T(calc_t<T>(pa[i]) + calc_t<T>(pb[i])));
    });
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) o[i] = T(double(pd[i]) * scale);
    set_from_double(ds, 0, get_as_double(ds, 0) + dsum);
  });
}

void ReferenceBackend::do_dropout(const DropoutArgs& args, NoDims) {
  const auto& [y, x, p, seed] = args;
  const uint64_t threshold = dropout_threshold(p);
  dispatch<float, bf16, double>(x, "dropout", [&]<class T>() {
    using S = ref::stat_t<T>;  // the product's precision: float32, float64 for float64
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const S scale = S(1.0 / (1.0 - p));
    const int64_t n = x.numel();
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i)
      py[i] = T(S(px[i]) * (dropout_keep(seed, uint64_t(i), threshold) ? scale : S(0)));
  });
}

void ReferenceBackend::do_transpose_groups(const TransposeGroupsArgs& args, NoDims) {
  const auto& [out, in] = args;
  const int64_t G = in.dim(0), R = in.dim(1), C = in.dim(2);
  dispatch<float, bf16, double>(in, "transpose_groups", [&]<class T>() {
    const T* pi = in.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for collapse(2)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < R; ++r) po[(g * C + c) * R + r] = pi[(g * R + r) * C + c];
  });
}

}  // namespace gemmax

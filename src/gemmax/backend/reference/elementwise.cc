// Memory, elementwise ops, reductions, embedding lookup and the AdamW update.
#include <cmath>
#include <cstring>

#include "gemmax/backend/reference/dispatch.h"
#include "gemmax/backend/reference/reference_backend.h"

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

void ReferenceBackend::do_fill(const FillArgs& args) {
  const auto& [x, value] = args;
  if (value == 0.0) {
    std::memset(x.raw(), 0, x.nbytes());
    return;
  }
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) set_from_double(x, i, value);
}

void ReferenceBackend::do_copy(const CopyArgs& args) {
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

void ReferenceBackend::do_add(const AddArgs& args) {
  const auto& [out, a, b] = args;
  dispatch<float, bf16, double>(out, "add", [&]<class T>() {
    T* o = out.data<T>();
    const T *pa = a.data<T>(), *pb = b.data<T>();
    const int64_t n = out.numel();
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) o[i] = T(calc_t<T>(pa[i]) + calc_t<T>(pb[i]));
  });
}

void ReferenceBackend::do_axpy(const AxpyArgs& args) {
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

void ReferenceBackend::do_scale(const ScaleArgs& args) {
  const auto& [x, alpha] = args;
  dispatch<float, bf16, double>(x, "scale", [&]<class T>() {
    T* p = x.data<T>();
    const int64_t n = x.numel();
    const calc_t<T> a = calc_t<T>(alpha);
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) p[i] = T(calc_t<T>(p[i]) * a);
  });
}

void ReferenceBackend::do_sum_squares(const SumSquaresArgs& args) {
  const auto& [sum, x] = args;
  dispatch<float, bf16, double>(x, "sum_squares", [&]<class T>() {
    const T* p = x.data<T>();
    ref::add_to_scalar(
        sum, ref::ordered_sum(x.numel(), [&](int64_t i) { return double(p[i]) * double(p[i]); }));
  });
}

void ReferenceBackend::do_scaled_sum_forward(const ScaledSumForwardArgs& args) {
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

void ReferenceBackend::do_scaled_sum_backward(const ScaledSumBackwardArgs& args) {
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

void ReferenceBackend::do_transpose_groups(const TransposeGroupsArgs& args) {
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

// ---- embedding -----------------------------------------------------------------------------

void ReferenceBackend::do_embedding_forward(const EmbeddingForwardArgs& args) {
  const auto& [x, tokens, table, scale] = args;
  const int64_t n = tokens.numel(), vocab = table.dim(0), d = table.dim(1);
  const int32_t* tok = tokens.data<int32_t>();
  for (int64_t t = 0; t < n; ++t)  // checked before the parallel loop, which cannot throw
    GEMMAX_CHECK(tok[t] >= 0 && tok[t] < vocab, "token id ", tok[t], " at position ", t,
                 " is outside the vocabulary [0, ", vocab, ")");
  // The table may be wider than x (fp32 master table, bf16 activations): one rounding.
  dispatch2<float, bf16, double>(x, table, "embedding_forward", [&]<class T, class W>() {
    const W* tab = table.data<W>();
    T* out = x.data<T>();
#pragma omp parallel for
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < d; ++i) out[t * d + i] = T(double(tab[tok[t] * d + i]) * scale);
    }
  });
}

void ReferenceBackend::do_embedding_backward(const EmbeddingBackwardArgs& args) {
  const auto& [dtable, dx, tokens, scale] = args;
  const int64_t n = tokens.numel(), d = dtable.dim(1);
  const int32_t* tok = tokens.data<int32_t>();
  dispatch2<float, bf16, double>(dtable, dx, "embedding_backward", [&]<class W, class T>() {
    W* dt = dtable.data<W>();
    const T* g = dx.data<T>();
    // Serial over tokens (repeated tokens add into the same row), vectorised over columns.
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < d; ++i) {
        W& out = dt[tok[t] * d + i];
        out = W(calc_t<W>(out) + calc_t<W>(W(double(g[t * d + i]) * scale)));
      }
  });
}

// ---- AdamW (docs/TRAINING.md §12: optax adamw, decoupled decay scaled by lr) -------------

void ReferenceBackend::do_adamw_step(const AdamwStepArgs& args) {
  const auto& [param, grad, m, v, s, scalars] = args;
  check_same(param, grad, "adamw_step");
  check_same(param, m, "adamw_step");
  check_same(param, v, "adamw_step");
  const double* sc = scalars.data<double>();
  for (int64_t i = 0; i < StepScalars::kCount; ++i)
    if (!std::isfinite(sc[i])) return;  // a non-finite step is not applied
  const double grad_scale = clip_factor(s.clip_norm, std::sqrt(sc[StepScalars::kGradSumSq]));
  const double bc1 = 1.0 - std::pow(s.b1, double(s.t));
  const double bc2 = 1.0 - std::pow(s.b2, double(s.t));
  dispatch<float, bf16, double>(param, "adamw_step", [&]<class T>() {
    T *p = param.data<T>(), *pm = m.data<T>(), *pv = v.data<T>();
    const T* g = grad.data<T>();
    const int64_t n = param.numel();
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double(g[i]) * grad_scale;
      const double mi = s.b1 * double(pm[i]) + (1.0 - s.b1) * gi;
      const double vi = s.b2 * double(pv[i]) + (1.0 - s.b2) * gi * gi;
      pm[i] = T(mi);
      pv[i] = T(vi);
      const double update = (mi / bc1) / (std::sqrt(vi / bc2 + s.eps_root) + s.eps);
      p[i] = T(double(p[i]) - s.lr * (update + s.weight_decay * double(p[i])));
    }
  });
}

}  // namespace gemmax

// RMSNorm and RoPE, forward and backward.
#include <cmath>
#include <vector>

#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {
using ref::calc_t;
using ref::stat_t;

void ReferenceBackend::do_rmsnorm_forward(const RmsnormForwardArgs& args, NoDims) {
  const auto& [y, rstd, x, w, eps, out_scale, residual, round_before_scale] = args;
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  // The scale may be wider than x (fp32 master weights, bf16 activations): it is read into fp64
  // and multiplied before the one rounding of y (seed change 2).
  const std::vector<double> wv = ref::read_vector(w);
  const double* pw = w.defined() ? wv.data() : nullptr;
  dispatch<float, bf16, double>(x, "rmsnorm_forward", [&]<class T>() {
    const T* px = x.data<T>();
    const T* pres = residual.defined() ? residual.data<T>() : nullptr;
    T* py = y.data<T>();
    stat_t<T>* pr = rstd.data<stat_t<T>>();
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * n;
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * double(xr[i]);
      const double rs = 1.0 / std::sqrt(ss / double(n) + eps);
      pr[r] = stat_t<T>(rs);
      for (int64_t i = 0; i < n; ++i) {
        const double w_i = (pw ? pw[i] : 1.0) * out_scale;
        // round_before_scale: x * rstd and the scale each rounded to T, multiplied, rounded.
        const T normed = round_before_scale ? T(double(T(double(xr[i]) * rs)) * double(T(w_i)))
                                            : T(double(xr[i]) * rs * w_i);
        // A residual adds to the rounded norm, as a separate add would.
        py[r * n + i] = pres ? T(calc_t<T>(pres[r * n + i]) + calc_t<T>(normed)) : normed;
      }
    }
  });
}

void ReferenceBackend::do_rmsnorm_backward(const RmsnormBackwardArgs& args, NoDims) {
  const auto& [dx, dw, dy, x, w, rstd, out_scale, accumulate_dx] = args;
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  const std::vector<double> wv = ref::read_vector(w);
  const double* pw = w.defined() ? wv.data() : nullptr;
  dispatch<float, bf16, double>(x, "rmsnorm_backward", [&]<class T>() {
    const T *px = x.data<T>(), *pdy = dy.data<T>();
    const stat_t<T>* pr = rstd.data<stat_t<T>>();
    T* pdx = dx.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
      const double rs = double(pr[r]);
      double mean_gx = 0;  // mean over the row of g * xhat
      for (int64_t i = 0; i < n; ++i) {
        const double g = double(pdy[r * n + i]) * (pw ? pw[i] : 1.0) * out_scale;
        mean_gx += g * double(px[r * n + i]) * rs;
      }
      mean_gx /= double(n);
      for (int64_t i = 0; i < n; ++i) {
        const double g = double(pdy[r * n + i]) * (pw ? pw[i] : 1.0) * out_scale;
        const double xhat = double(px[r * n + i]) * rs;
        const double d = rs * (g - xhat * mean_gx);
        pdx[r * n + i] = T(accumulate_dx ? double(pdx[r * n + i]) + d : d);
      }
    }
    if (!dw.defined()) return;
    // dw is in the weights' dtype (fp32 gradients of bf16 activations).
    std::vector<double> sums(n);
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t r = 0; r < rows; ++r)
        s += double(pdy[r * n + i]) * double(px[r * n + i]) * double(pr[r]);
      sums[i] = s * out_scale;
    }
    ref::accumulate_vector(dw, sums);
  });
}

void ReferenceBackend::do_rope_table(const RopeTableArgs& args, NoDims) {
  const auto& [table, positions, inv_freq] = args;
  const int64_t T_ = positions.numel(), half = inv_freq.numel();
  const int32_t* pos = positions.data<int32_t>();
  const double* freq = inv_freq.data<double>();
  dispatch<float, bf16, double>(table, "rope_table", [&]<class S>() {
    S* out = table.data<S>();
#pragma omp parallel for
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double ang = double(pos[t]) * freq[i];
        out[(t * half + i) * 2] = S(std::cos(ang));
        out[(t * half + i) * 2 + 1] = S(std::sin(ang));
      }
  });
}

void ReferenceBackend::do_rope(const RopeArgs& args, NoDims) {
  const auto& [x, table, inverse] = args;
  const int64_t T_ = x.dim(0), heads = x.dim(1), hd = x.dim(2), half = hd / 2;
  const double sign = inverse ? -1.0 : 1.0;
  dispatch<float, bf16, double>(x, "rope", [&]<class T>() {
    T* px = x.data<T>();
    const stat_t<T>* tab = table.data<stat_t<T>>();
#pragma omp parallel for
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        T* v = px + (t * heads + h) * hd;
        for (int64_t i = 0; i < half; ++i) {
          const double cs = double(tab[(t * half + i) * 2]);
          const double sn = sign * double(tab[(t * half + i) * 2 + 1]);
          const double a = double(v[i]), b = double(v[i + half]);
          v[i] = T(a * cs - b * sn);
          v[i + half] = T(b * cs + a * sn);
        }
      }
  });
}

}  // namespace gemmax

// RMSNorm (with its scale, an optional residual, and the seed's fp32-scale rounding) and RoPE,
// forward and backward: one pass over each row, statistics in fp32 (sums of squares in fp64).
#include <cmath>
#include <vector>

#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"

namespace gemmax {
using namespace cpu;

namespace {

// The norm's scale per column (w * out_scale, or out_scale alone), in fp32.
std::vector<float> scale_row(const Tensor& w, int64_t n, double out_scale) {
  std::vector<float> s(static_cast<size_t>(n), float(out_scale));
  if (!w.defined()) return s;
  GEMMAX_CHECK(w.numel() == n, "rmsnorm: scale ", w.str(), " for rows of ", n);
  for (int64_t i = 0; i < n; ++i) s[size_t(i)] = float(get_as_double(w, i) * out_scale);
  return s;
}

constexpr int64_t kRowBlock = 64;  // rows per partial sum of a norm-scale gradient

// y = [res +] x * rstd * scale for one row; returns rstd.
template <class T>
GEMMAX_SIMD_BODY float norm_row(T* y, const T* x, const T* res, const float* scale, int64_t n,
                                double eps, bool round_first) {
  double ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < n; ++i) ss += double(to_f32(x[i])) * double(to_f32(x[i]));
  const float rs = float(1.0 / std::sqrt(ss / double(n) + eps));
  if (round_first) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = from_f32<T>(round_f32<T>(to_f32(x[i]) * rs) * scale[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = from_f32<T>(to_f32(x[i]) * rs * scale[i]);
  }
  if (res) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = from_f32<T>(to_f32(res[i]) + to_f32(y[i]));
  }
  return rs;
}

template <class T>
GEMMAX_AVX512 float norm_row_avx512(T* y, const T* x, const T* res, const float* scale, int64_t n,
                                    double eps, bool round_first) {
  return norm_row(y, x, res, scale, n, eps, round_first);
}

// One row's dx (+)= rstd (g - xhat mean(g xhat)), g = dy * scale; part[i] += dy xhat out_scale.
template <class T>
GEMMAX_SIMD_BODY void norm_grad_row(T* dx, float* part, const T* dy, const T* x, const float* scale,
                                    float rs, int64_t n, float out_scale, bool accumulate) {
  float mean_gx = 0;
#pragma omp simd reduction(+ : mean_gx)
  for (int64_t i = 0; i < n; ++i) mean_gx += to_f32(dy[i]) * scale[i] * to_f32(x[i]);
  mean_gx *= rs / float(n);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xhat = to_f32(x[i]) * rs;
    const float d = rs * (to_f32(dy[i]) * scale[i] - xhat * mean_gx);
    dx[i] = from_f32<T>(accumulate ? to_f32(dx[i]) + d : d);
  }
  if (part) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) part[i] += to_f32(dy[i]) * to_f32(x[i]) * rs * out_scale;
  }
}

template <class T>
GEMMAX_AVX512 void norm_grad_row_avx512(T* dx, float* part, const T* dy, const T* x,
                                        const float* scale, float rs, int64_t n, float out_scale,
                                        bool accumulate) {
  norm_grad_row(dx, part, dy, x, scale, rs, n, out_scale, accumulate);
}

// Rotates one head's split-half pairs by the table's (cos, sin) (sign -1: back).
template <class T>
GEMMAX_SIMD_BODY void rope_head(T* v, const float* cs, int64_t half, float sign) {
#pragma omp simd
  for (int64_t i = 0; i < half; ++i) {
    const float c = cs[2 * i], s = sign * cs[2 * i + 1];
    const float a = to_f32(v[i]), b = to_f32(v[i + half]);
    v[i] = from_f32<T>(a * c - b * s);
    v[i + half] = from_f32<T>(b * c + a * s);
  }
}

template <class T>
GEMMAX_AVX512 void rope_head_avx512(T* v, const float* cs, int64_t half, float sign) {
  rope_head(v, cs, half, sign);
}

}  // namespace

void CpuBackend::do_rmsnorm_forward(const RmsnormForwardArgs& args, NoDims) {
  const auto& [y, rstd, x, w, eps, out_scale, residual, round_before_scale] = args;
  if (is_wide(x)) return reference_.do_rmsnorm_forward(args, {});
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  GEMMAX_CHECK(y.numel() == x.numel() && rstd.numel() == rows && y.dtype() == x.dtype() &&
                   rstd.dtype() == DType::F32,
               "rmsnorm_forward shapes: x ", x.str(), " y ", y.str(), " rstd ", rstd.str());
  GEMMAX_CHECK(
      !residual.defined() || (residual.dtype() == y.dtype() && residual.numel() == y.numel()),
      "rmsnorm_forward: residual ", residual.str(), " for y ", y.str());
  const std::vector<float> ws = scale_row(w, n, out_scale);
  const bool avx512 = wide_vectors(isa_);
  dispatch<float, bf16>(x, "rmsnorm_forward", [&]<class T>() {
    const T* px = x.data<T>();
    const T* pres = residual.defined() ? residual.data<T>() : nullptr;
    T* py = y.data<T>();
    float* pr = rstd.data<float>();
    std::vector<float> ws_rounded(ws);
    if (round_before_scale)
      for (float& v : ws_rounded) v = round_f32<T>(v);
    const float* scale = round_before_scale ? ws_rounded.data() : ws.data();
#pragma omp parallel for if (rows * n > (1 << 15))
    for (int64_t r = 0; r < rows; ++r) {
      const T* res = pres ? pres + r * n : nullptr;
      pr[r] = avx512
                  ? norm_row_avx512(py + r * n, px + r * n, res, scale, n, eps, round_before_scale)
                  : norm_row(py + r * n, px + r * n, res, scale, n, eps, round_before_scale);
    }
  });
}

void CpuBackend::do_rmsnorm_backward(const RmsnormBackwardArgs& args, NoDims) {
  const auto& [dx, dw, dy, x, w, rstd, out_scale, accumulate_dx] = args;
  if (is_wide(x)) return reference_.do_rmsnorm_backward(args, {});
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  GEMMAX_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel() && rstd.numel() == rows &&
                   dx.dtype() == x.dtype() && dy.dtype() == x.dtype(),
               "rmsnorm_backward shapes: x ", x.str(), " dx ", dx.str(), " dy ", dy.str());
  const std::vector<float> ws = scale_row(w, n, out_scale);
  const bool avx512 = wide_vectors(isa_);
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  std::vector<float> partial(dw.defined() ? size_t(blocks * n) : 0, 0.0f);
  dispatch<float, bf16>(x, "rmsnorm_backward", [&]<class T>() {
    const T *px = x.data<T>(), *pdy = dy.data<T>();
    const float* pr = rstd.data<float>();
    T* pdx = dx.data<T>();
    const float scale = float(out_scale);
    const float* wsp = ws.data();
    float* partials = partial.data();
    const bool with_dw = dw.defined();
#pragma omp parallel for if (rows * n > (1 << 15))
    for (int64_t b = 0; b < blocks; ++b) {
      float* part = with_dw ? partials + b * n : nullptr;
      for (int64_t r = b * kRowBlock; r < std::min(rows, (b + 1) * kRowBlock); ++r) {
        if (avx512)
          norm_grad_row_avx512(pdx + r * n, part, pdy + r * n, px + r * n, wsp, pr[r], n, scale,
                               accumulate_dx);
        else
          norm_grad_row(pdx + r * n, part, pdy + r * n, px + r * n, wsp, pr[r], n, scale,
                        accumulate_dx);
      }
    }
  });
  if (!dw.defined()) return;
  GEMMAX_CHECK(dw.numel() == n, "rmsnorm_backward: dw ", dw.str(), " for rows of ", n);
  // Block partial sums added in block order, into the weights' dtype.
  std::vector<double> sums(static_cast<size_t>(n), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < n; ++i) sums[size_t(i)] += partial[size_t(b * n + i)];
  for (int64_t i = 0; i < n; ++i) set_from_double(dw, i, get_as_double(dw, i) + sums[size_t(i)]);
}

void CpuBackend::do_rope_table(const RopeTableArgs& args, NoDims) {
  const auto& [table, positions, inv_freq] = args;
  if (is_wide(table)) return reference_.do_rope_table(args, {});
  const int64_t T_ = positions.numel(), half = inv_freq.numel();
  GEMMAX_CHECK(table.numel() == T_ * half * 2 && table.dtype() == DType::F32, "rope_table: table ",
               table.str(), " for ", T_, " positions and ", half, " frequencies");
  const int32_t* pos = positions.data<int32_t>();
  const double* freq = inv_freq.data<double>();
  float* out = table.data<float>();
#pragma omp parallel for if (T_ * half > 4096)
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double ang = double(pos[t]) * freq[i];
      out[(t * half + i) * 2] = float(std::cos(ang));
      out[(t * half + i) * 2 + 1] = float(std::sin(ang));
    }
}

void CpuBackend::do_rope(const RopeArgs& args, NoDims) {
  const auto& [x, table, inverse] = args;
  if (is_wide(x)) return reference_.do_rope(args, {});
  GEMMAX_CHECK(x.ndim() == 3 && table.numel() == x.dim(0) * x.dim(2) && table.dtype() == DType::F32,
               "rope shapes: x ", x.str(), " table ", table.str());
  const int64_t T_ = x.dim(0), heads = x.dim(1), hd = x.dim(2), half = hd / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  const float* tab = table.data<float>();
  const bool avx512 = wide_vectors(isa_);
  dispatch<float, bf16>(x, "rope", [&]<class T>() {
    T* px = x.data<T>();
#pragma omp parallel for if (x.numel() > (1 << 15))
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        T* v = px + (t * heads + h) * hd;
        if (avx512)
          rope_head_avx512(v, tab + t * half * 2, half, sign);
        else
          rope_head(v, tab + t * half * 2, half, sign);
      }
  });
}

}  // namespace gemmax

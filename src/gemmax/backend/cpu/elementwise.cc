// Elementwise ops and reductions.
#include <cstring>

#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"
#include "gemmax/base/dropout_mask.h"

namespace gemmax {
using namespace cpu;

namespace {

template <class D, class S>
GEMMAX_SIMD_BODY void cast(D* d, const S* s, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = from_f32<D>(to_f32(s[i]));
}
template <class D, class S>
GEMMAX_AVX512 void cast_avx512(D* d, const S* s, int64_t n) {
  cast(d, s, n);
}

template <class T>
GEMMAX_SIMD_BODY double sum_of_squares(const T* p, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += double(to_f32(p[i])) * double(to_f32(p[i]));
  return s;
}

// o = dy * scale; returns sum dy (a + b), the sum rounded to T first.
template <class T>
GEMMAX_SIMD_BODY double scaled_sum_grad(T* o, const T* dy, const T* a, const T* b, int64_t n,
                                        float scale) {
  double acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) {
    o[i] = from_f32<T>(to_f32(dy[i]) * scale);
    acc += double(to_f32(dy[i])) * double(round_f32<T>(to_f32(a[i]) + to_f32(b[i])));
  }
  return acc;
}

// y = x * keep / (1 - p) over elements [lo, lo + n), in fp32.
template <class T>
GEMMAX_SIMD_BODY void dropout_chunk(T* y, const T* x, int64_t lo, int64_t n, uint64_t seed,
                                    uint64_t threshold, float scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = from_f32<T>(to_f32(x[i]) *
                       (dropout_keep(seed, uint64_t(lo + i), threshold) ? scale : 0.0f));
}
template <class T>
GEMMAX_AVX512 void dropout_chunk_avx512(T* y, const T* x, int64_t lo, int64_t n, uint64_t seed,
                                        uint64_t threshold, float scale) {
  dropout_chunk(y, x, lo, n, seed, threshold, scale);
}

}  // namespace

void CpuBackend::do_fill(const FillArgs& args, NoDims) {
  const auto& [x, value] = args;
  if (is_wide(x)) return reference_.do_fill(args, {});
  const int64_t n = x.numel();
  if (value == 0.0 || x.dtype() == DType::I32 || x.dtype() == DType::U8) {
    if (value != 0.0) return reference_.do_fill(args, {});
    char* p = static_cast<char*>(x.raw());
    const size_t bytes = x.nbytes();
#pragma omp parallel for if (bytes > (size_t(1) << 20))
    for (int64_t c = 0; c < int64_t((bytes + 65535) / 65536); ++c)
      std::memset(p + c * 65536, 0, std::min<size_t>(65536, bytes - size_t(c) * 65536));
    return;
  }
  dispatch<float, bf16>(x, "fill", [&]<class T>() {
    T* p = x.data<T>();
    const T v = from_f32<T>(float(value));
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

void CpuBackend::do_copy(const CopyArgs& args, NoDims) {
  const auto& [dst, src] = args;
  const int64_t n = src.numel();
  if (dst.dtype() == src.dtype()) {
    const char* s = static_cast<const char*>(src.raw());
    char* d = static_cast<char*>(dst.raw());
    const int64_t bytes = int64_t(src.nbytes()), chunk = 1 << 16;
#pragma omp parallel for if (bytes > (int64_t(1) << 20))
    for (int64_t c = 0; c < (bytes + chunk - 1) / chunk; ++c)
      std::memcpy(d + c * chunk, s + c * chunk, size_t(std::min(chunk, bytes - c * chunk)));
    return;
  }
  if (!is_fast(dst) || !is_fast(src)) return reference_.do_copy(args, {});
  // fp32 <-> bf16 (a layer's fp32 weights to their bf16 compute copy): one rounding.
  const bool avx512 = wide_vectors(isa_);
  dispatch2<float, bf16>(dst, src, "copy", [&]<class D, class S>() {
    D* d = dst.data<D>();
    const S* s = src.data<S>();
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t len = std::min(kChunk, n - c);
      if (avx512)
        cast_avx512(d + c, s + c, len);
      else
        cast(d + c, s + c, len);
    }
  });
}

void CpuBackend::do_add(const AddArgs& args, NoDims) {
  const auto& [out, a, b] = args;
  if (is_wide(out)) return reference_.do_add(args, {});
  dispatch<float, bf16>(out, "add", [&]<class T>() {
    T* o = out.data<T>();
    const T *pa = a.data<T>(), *pb = b.data<T>();
    const int64_t n = out.numel();
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) o[i] = from_f32<T>(to_f32(pa[i]) + to_f32(pb[i]));
  });
}

void CpuBackend::do_axpy(const AxpyArgs& args, NoDims) {
  const auto& [y, alpha, x] = args;
  if (is_wide(y)) return reference_.do_axpy(args, {});
  dispatch<float, bf16>(y, "axpy", [&]<class T>() {
    T* py = y.data<T>();
    const T* px = x.data<T>();
    const float a = float(alpha);
    const int64_t n = y.numel();
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = from_f32<T>(to_f32(py[i]) + a * to_f32(px[i]));
  });
}

void CpuBackend::do_scale(const ScaleArgs& args, NoDims) {
  const auto& [x, alpha] = args;
  if (is_wide(x)) return reference_.do_scale(args, {});
  dispatch<float, bf16>(x, "scale", [&]<class T>() {
    T* p = x.data<T>();
    const float a = float(alpha);
    const int64_t n = x.numel();
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] = from_f32<T>(to_f32(p[i]) * a);
  });
}

void CpuBackend::do_sum_squares(const SumSquaresArgs& args, NoDims) {
  const auto& [sum, x] = args;
  if (is_wide(x)) return reference_.do_sum_squares(args, {});
  dispatch<float, bf16>(x, "sum_squares", [&]<class T>() {
    const T* p = x.data<T>();
    add_to_scalar(sum, ordered_sum(x.numel(), [p](int64_t b, int64_t e) {
                    return sum_of_squares(p + b, e - b);
                  }));
  });
}

void CpuBackend::do_scaled_sum_forward(const ScaledSumForwardArgs& args, NoDims) {
  const auto& [y, a, b, s] = args;
  if (is_wide(y)) return reference_.do_scaled_sum_forward(args, {});
  const float scale = float(get_as_double(s, 0));
  dispatch<float, bf16>(y, "scaled_sum_forward", [&]<class T>() {
    T* o = y.data<T>();
    const T *pa = a.data<T>(), *pb = b.data<T>();
    const int64_t n = y.numel();
    const float sc = scale;
    // The sum is rounded to the activation dtype first (as a separate add would).
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i)
      o[i] = from_f32<T>(round_f32<T>(to_f32(pa[i]) + to_f32(pb[i])) * sc);
  });
}

void CpuBackend::do_scaled_sum_backward(const ScaledSumBackwardArgs& args, NoDims) {
  const auto& [dab, ds, dy, a, b, s] = args;
  if (is_wide(dy)) return reference_.do_scaled_sum_backward(args, {});
  const float scale = float(get_as_double(s, 0));
  dispatch<float, bf16>(dy, "scaled_sum_backward", [&]<class T>() {
    const T *pd = dy.data<T>(), *pa = a.data<T>(), *pb = b.data<T>();
    T* o = dab.data<T>();
    const double dsum = ordered_sum(dy.numel(), [=](int64_t lo, int64_t hi) {
      return scaled_sum_grad(o + lo, pd + lo, pa + lo, pb + lo, hi - lo, scale);
    });
    set_from_double(ds, 0, get_as_double(ds, 0) + dsum);
  });
}

void CpuBackend::do_dropout(const DropoutArgs& args, NoDims) {
  const auto& [y, x, p, seed] = args;
  if (is_wide(x)) return reference_.do_dropout(args, {});
  const uint64_t threshold = dropout_threshold(p);
  const float scale = float(1.0 / (1.0 - p));
  const bool avx512 = wide_vectors(isa_);
  dispatch<float, bf16>(x, "dropout", [&]<class T>() {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t len = std::min(kChunk, n - c);
      if (avx512)
        dropout_chunk_avx512(py + c, px + c, c, len, seed, threshold, scale);
      else
        dropout_chunk(py + c, px + c, c, len, seed, threshold, scale);
    }
  });
}

void CpuBackend::do_transpose_groups(const TransposeGroupsArgs& args, NoDims) {
  const auto& [out, in] = args;
  if (is_wide(in)) return reference_.do_transpose_groups(args, {});
  GEMMAX_CHECK(in.ndim() == 3 && out.ndim() == 3 && out.dim(0) == in.dim(0) &&
                   out.dim(1) == in.dim(2) && out.dim(2) == in.dim(1) && out.dtype() == in.dtype(),
               "transpose_groups: ", in.str(), " into ", out.str());
  const int64_t G = in.dim(0), R = in.dim(1), C = in.dim(2), tile = 32;
  // In 32 x 32 tiles, so that both sides stay in cache (the seed Part 3 "off" path).
  dispatch<float, bf16>(in, "transpose_groups", [&]<class T>() {
    const T* pi = in.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for collapse(2)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t r0 = 0; r0 < R; r0 += tile)
        for (int64_t c0 = 0; c0 < C; c0 += tile)
          for (int64_t c = c0; c < std::min(C, c0 + tile); ++c)
            for (int64_t r = r0; r < std::min(R, r0 + tile); ++r)
              po[(g * C + c) * R + r] = pi[(g * R + r) * C + c];
  });
}

}  // namespace gemmax

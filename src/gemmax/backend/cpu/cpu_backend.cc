// The cpu backend's setup, memory, elementwise ops, embedding and AdamW.
#include "gemmax/backend/cpu/cpu_backend.h"

#include <omp.h>

#include <cmath>
#include <cstring>

#include "gemmax/backend/cpu/dispatch.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"

namespace gemmax {
using namespace cpu;

namespace {

// Threads when num_threads is 0: the cores this process may use (its CPU affinity).
int default_threads() { return omp_get_num_procs(); }

constexpr int64_t kParallelMin = 1 << 15;  // elements below which a loop runs on one thread

template <class D, class S>
GEMMAX_SIMD_BODY void cast(D* d, const S* s, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = from_f32<D>(to_f32(s[i]));
}
template <class D, class S>
GEMMAX_AVX512 void cast_avx512(D* d, const S* s, int64_t n) {
  cast(d, s, n);
}

struct AdamWConstants {
  float gs, b1, b2, eps, eps_root, inv_bc1, inv_bc2, lr, wd;
};

GEMMAX_SIMD_BODY void adamw(float* p, float* m, float* v, const float* g, int64_t n,
                            AdamWConstants c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * c.gs;
    const float mi = c.b1 * m[i] + (1.0f - c.b1) * gi;
    const float vi = c.b2 * v[i] + (1.0f - c.b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * c.inv_bc1) / (std::sqrt(vi * c.inv_bc2 + c.eps_root) + c.eps);
    p[i] = p[i] - c.lr * (update + c.wd * p[i]);
  }
}
GEMMAX_AVX512 void adamw_avx512(float* p, float* m, float* v, const float* g, int64_t n,
                                AdamWConstants c) {
  adamw(p, m, v, g, n, c);
}

constexpr int64_t kChunk = 1 << 14;  // elements per parallel chunk of a flat loop

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
constexpr int64_t kAttentionScratch = int64_t(8) << 20;  // per thread

}  // namespace

CpuBackend::CpuBackend(const BackendOptions& options)
    : isa_(choose_isa(options.isa, &isa_why_)),
      threads_(options.num_threads > 0 ? options.num_threads : default_threads()) {
  omp_set_num_threads(threads_);
  const int64_t shared = gemm_shared_bytes(), per_thread = gemm_thread_bytes();
  const int64_t attention = options.attention_scratch_bytes > 0
                                ? (options.attention_scratch_bytes + 63) / 64 * 64
                                : kAttentionScratch;
  {
    const AllocationScope what(str_cat("the cpu backend's scratch for ", threads_,
                                       " threads (num_threads)"));
    scratch_ = alloc({shared + (per_thread + attention) * threads_}, DType::U8, MemKind::Workspace);
  }
  char* base = static_cast<char*>(scratch_.raw());
  gemm_.shared = base;
  gemm_.shared_bytes = shared;
  gemm_.thread_bytes = per_thread;
  for (int t = 0; t < threads_; ++t) gemm_.thread.push_back(base + shared + per_thread * t);
  base += shared + per_thread * threads_;
  attention_scratch_bytes_ = attention;
  for (int t = 0; t < threads_; ++t) attention_scratch_.push_back(base + attention * t);
}

std::string CpuBackend::describe() const {
  if (isa_ == Isa::Portable)
    return str_cat("cpu (portable kernels, slower: ", isa_why_, "; ", threads_, " threads)");
  return str_cat("cpu (", isa_name(isa_), " kernels, ", isa_why_, "; ", threads_, " threads)");
}

Tensor CpuBackend::alloc(const Shape& shape, DType dtype, MemKind kind) {
  for (int64_t d : shape) GEMMAX_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  auto st = std::make_shared<Storage>();
  st->bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  st->ptr = allocator_->allocate(st->bytes);
  st->kind = kind;
  st->tracker = &tracker();
  st->release = HostAllocator::release;
  st->allocator = allocator_.get();
  st->keep_alive = allocator_;  // blocks go back to the cache even after the backend is gone
  st->tracker->on_alloc(kind, st->bytes);
  return Tensor::from_storage(std::move(st), shape, dtype);
}

void CpuBackend::upload(const Tensor& dst, const Tensor& host) {
  GEMMAX_CHECK(dst.dtype() == host.dtype() && dst.numel() == host.numel(), "upload: ", host.str(),
               " into ", dst.str());
  std::memcpy(dst.raw(), host.raw(), host.nbytes());
}

// ---- elementwise --------------------------------------------------------------------------

void CpuBackend::do_fill(const FillArgs& args) {
  const auto& [x, value] = args;
  if (is_wide(x)) return reference_.do_fill(args);
  const int64_t n = x.numel();
  if (value == 0.0 || x.dtype() == DType::I32 || x.dtype() == DType::U8) {
    if (value != 0.0) return reference_.do_fill(args);
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

void CpuBackend::do_copy(const CopyArgs& args) {
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
  if (!is_fast(dst) || !is_fast(src)) return reference_.do_copy(args);
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

void CpuBackend::do_add(const AddArgs& args) {
  const auto& [out, a, b] = args;
  if (is_wide(out)) return reference_.do_add(args);
  dispatch<float, bf16>(out, "add", [&]<class T>() {
    T* o = out.data<T>();
    const T *pa = a.data<T>(), *pb = b.data<T>();
    const int64_t n = out.numel();
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) o[i] = from_f32<T>(to_f32(pa[i]) + to_f32(pb[i]));
  });
}

void CpuBackend::do_axpy(const AxpyArgs& args) {
  const auto& [y, alpha, x] = args;
  if (is_wide(y)) return reference_.do_axpy(args);
  dispatch<float, bf16>(y, "axpy", [&]<class T>() {
    T* py = y.data<T>();
    const T* px = x.data<T>();
    const float a = float(alpha);
    const int64_t n = y.numel();
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = from_f32<T>(to_f32(py[i]) + a * to_f32(px[i]));
  });
}

void CpuBackend::do_scale(const ScaleArgs& args) {
  const auto& [x, alpha] = args;
  if (is_wide(x)) return reference_.do_scale(args);
  dispatch<float, bf16>(x, "scale", [&]<class T>() {
    T* p = x.data<T>();
    const float a = float(alpha);
    const int64_t n = x.numel();
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] = from_f32<T>(to_f32(p[i]) * a);
  });
}

void CpuBackend::do_sum_squares(const SumSquaresArgs& args) {
  const auto& [sum, x] = args;
  if (is_wide(x)) return reference_.do_sum_squares(args);
  dispatch<float, bf16>(x, "sum_squares", [&]<class T>() {
    const T* p = x.data<T>();
    add_to_scalar(sum, ordered_sum(x.numel(), [p](int64_t b, int64_t e) {
                    return sum_of_squares(p + b, e - b);
                  }));
  });
}

void CpuBackend::do_scaled_sum_forward(const ScaledSumForwardArgs& args) {
  const auto& [y, a, b, s] = args;
  if (is_wide(y)) return reference_.do_scaled_sum_forward(args);
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

void CpuBackend::do_scaled_sum_backward(const ScaledSumBackwardArgs& args) {
  const auto& [dab, ds, dy, a, b, s] = args;
  if (is_wide(dy)) return reference_.do_scaled_sum_backward(args);
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

void CpuBackend::do_transpose_groups(const TransposeGroupsArgs& args) {
  const auto& [out, in] = args;
  if (is_wide(in)) return reference_.do_transpose_groups(args);
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

// ---- embedding -----------------------------------------------------------------------------

void CpuBackend::do_embedding_forward(const EmbeddingForwardArgs& args) {
  const auto& [x, tokens, table, scale] = args;
  if (is_wide(x) || is_wide(table)) return reference_.do_embedding_forward(args);
  const int64_t n = tokens.numel(), vocab = table.dim(0), d = table.dim(1);
  GEMMAX_CHECK(x.numel() == n * d, "embedding_forward: x ", x.str(), " for ", n, " tokens");
  const int32_t* tok = tokens.data<int32_t>();
  for (int64_t t = 0; t < n; ++t)
    GEMMAX_CHECK(tok[t] >= 0 && tok[t] < vocab, "token id ", tok[t], " at position ", t,
                 " is outside the vocabulary [0, ", vocab, ")");
  dispatch2<float, bf16>(x, table, "embedding_forward", [&]<class T, class W>() {
    const W* tab = table.data<W>();
    T* out = x.data<T>();
    const float s = float(scale);
#pragma omp parallel for if (n * d > kParallelMin)
    for (int64_t t = 0; t < n; ++t) {
      const W* row = tab + tok[t] * d;
      T* o = out + t * d;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) o[i] = from_f32<T>(to_f32(row[i]) * s);
    }
  });
}

void CpuBackend::do_embedding_backward(const EmbeddingBackwardArgs& args) {
  const auto& [dtable, dx, tokens, scale] = args;
  if (is_wide(dtable) || is_wide(dx)) return reference_.do_embedding_backward(args);
  const int64_t n = tokens.numel(), d = dtable.dim(1);
  const int32_t* tok = tokens.data<int32_t>();
  dispatch2<float, bf16>(dtable, dx, "embedding_backward", [&]<class W, class T>() {
    W* dt = dtable.data<W>();
    const T* g = dx.data<T>();
    const float s = float(scale);
    // Columns split over threads; tokens in order within each: repeated tokens add into the
    // same row in a fixed order.
#pragma omp parallel for if (n * d > kParallelMin)
    for (int64_t c0 = 0; c0 < d; c0 += 64)
      for (int64_t t = 0; t < n; ++t) {
        W* row = dt + tok[t] * d;
        const T* gr = g + t * d;
        const int64_t c1 = std::min(d, c0 + 64);
#pragma omp simd
        for (int64_t i = c0; i < c1; ++i)
          row[i] = from_f32<W>(to_f32(row[i]) + to_f32(from_f32<W>(to_f32(gr[i]) * s)));
      }
  });
}

// ---- AdamW (optax adamw, decoupled decay scaled by lr) --------------------------------------

void CpuBackend::do_adamw_step(const AdamwStepArgs& args) {
  const auto& [param, grad, m, v, s, scalars] = args;
  if (is_wide(param)) return reference_.do_adamw_step(args);
  check_same(param, grad, "adamw_step");
  check_same(param, m, "adamw_step");
  check_same(param, v, "adamw_step");
  GEMMAX_CHECK(param.dtype() == DType::F32, "adamw_step: float32 master weights, got ",
               param.str());
  GEMMAX_CHECK(scalars.dtype() == DType::F64 && scalars.numel() == StepScalars::kCount,
               "adamw_step: the step scalars must be float64 [", int64_t(StepScalars::kCount),
               "], got ", scalars.str());
  const double* sc = scalars.data<double>();
  for (int64_t i = 0; i < StepScalars::kCount; ++i)
    if (!std::isfinite(sc[i])) return;  // a non-finite step is not applied
  const AdamWConstants c{float(clip_factor(s.clip_norm, std::sqrt(sc[StepScalars::kGradSumSq]))),
                         float(s.b1),
                         float(s.b2),
                         float(s.eps),
                         float(s.eps_root),
                         float(1.0 / (1.0 - std::pow(s.b1, double(s.t)))),
                         float(1.0 / (1.0 - std::pow(s.b2, double(s.t)))),
                         float(s.lr),
                         float(s.weight_decay)};
  float *p = param.data<float>(), *pm = m.data<float>(), *pv = v.data<float>();
  const float* g = grad.data<float>();
  const int64_t n = param.numel();
  const bool avx512 = wide_vectors(isa_);
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    if (avx512)
      adamw_avx512(p + i, pm + i, pv + i, g + i, len, c);
    else
      adamw(p + i, pm + i, pv + i, g + i, len, c);
  }
}

void CpuBackend::do_attention_decode(const AttentionDecodeArgs& args) {
  reference_.do_attention_decode(args);
}
void CpuBackend::do_vocab_ce_max(const VocabCeMaxArgs& args) { reference_.do_vocab_ce_max(args); }
void CpuBackend::do_vocab_ce_sums(const VocabCeSumsArgs& args) {
  reference_.do_vocab_ce_sums(args);
}
void CpuBackend::do_vocab_ce_finish(const VocabCeFinishArgs& args) {
  reference_.do_vocab_ce_finish(args);
}

}  // namespace gemmax

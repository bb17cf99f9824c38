// Elementwise kernels, ordered reductions into device scalars, the embedding lookup and AdamW.
#pragma once

#include "gemmax/backend/cuda/kernels/kernel_base.h"
#include "gemmax/base/dropout_mask.h"

namespace gemmax::kern {

// W consecutive elements in one access: kVec<T> of them are 16 bytes (the widest load), W = 1
// the element itself. The address must be a multiple of the pack's size (vec_ok).
template <class T, int W>
struct alignas(W * sizeof(T)) Pack {
  T v[W];
};
template <class T>
constexpr int kVec = int(16 / sizeof(T));
template <int W, class T>
GEMMAX_HD Pack<T, W> load_pack(const T* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const Pack<T, W>*>(p);
#else
  Pack<T, W> r;
  std::memcpy(static_cast<void*>(&r), p, sizeof r);  // bf16 is not trivial: bytes
  return r;
#endif
}
template <int W, class T>
GEMMAX_HD void store_pack(T* p, const Pack<T, W>& r) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<Pack<T, W>*>(p) = r;
#else
  std::memcpy(static_cast<void*>(p), &r, sizeof r);
#endif
}

// N consecutive elements in the widest accesses: one pack when they fit in 16 bytes (p aligned
// to their size), else 16-byte packs (p 16-byte aligned). Lets operands of different dtypes go
// the same number of elements per step.
template <int N, class T>
GEMMAX_HD Pack<T, N> load_wide(const T* p) {
  if constexpr (N * sizeof(T) <= 16) {
    return load_pack<N>(p);
  } else {
    constexpr int W = kVec<T>;
    Pack<T, N> r;
    GEMMAX_UNROLL
    for (int h = 0; h < N; h += W) {
      const Pack<T, W> q = load_pack<W>(p + h);
      GEMMAX_UNROLL
      for (int e = 0; e < W; ++e) r.v[h + e] = q.v[e];
    }
    return r;
  }
}
template <int N, class T>
GEMMAX_HD void store_wide(T* p, const Pack<T, N>& r) {
  if constexpr (N * sizeof(T) <= 16) {
    store_pack<N>(p, r);
  } else {
    constexpr int W = kVec<T>;
    GEMMAX_UNROLL
    for (int h = 0; h < N; h += W) {
      Pack<T, W> q;
      GEMMAX_UNROLL
      for (int e = 0; e < W; ++e) q.v[e] = r.v[h + e];
      store_pack<W>(p + h, q);
    }
  }
}

// Threads of a one-dimensional grid, striding over [0, n).
#define GEMMAX_GRID_STRIDE(x, i, n)                                         \
  for (int64_t i = int64_t((x).bx()) * (x).nthreads() + (x).tid(); i < (n); \
       i += int64_t((x).gx()) * (x).nthreads())

struct FillKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* p, int64_t n, E v) const {
    GEMMAX_GRID_STRIDE(x, i, n) p[i] = v;
  }
};

// d = s in another dtype, one rounding. `vec`: both 16-byte aligned, so eight elements go per
// step in 16-byte accesses on either side (the rest one by one).
struct ConvertKernel {
  static constexpr int kMaxThreads = 256, kChunk = 8;
  template <class X, class D, class S>
  GEMMAX_KFN void operator()(X& x, D* d, const S* s, int64_t n, bool vec) const {
    const int64_t chunks = vec ? n / kChunk : 0;
    GEMMAX_GRID_STRIDE(x, i, chunks) {
      const Pack<S, kChunk> in = load_wide<kChunk>(s + kChunk * i);
      Pack<D, kChunk> out;
      GEMMAX_UNROLL
      for (int e = 0; e < kChunk; ++e) out.v[e] = from_double<D>(double(to_acc(in.v[e])));
      store_wide<kChunk>(d + kChunk * i, out);
    }
    GEMMAX_GRID_STRIDE(x, i, n - kChunk * chunks) {
      const int64_t j = kChunk * chunks + i;
      d[j] = from_double<D>(double(to_acc(s[j])));
    }
  }
};

struct AddKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* out, const E* a, const E* b, int64_t n) const {
    GEMMAX_GRID_STRIDE(x, i, n) out[i] = from_acc<E>(to_acc(a[i]) + to_acc(b[i]));
  }
};

// y += alpha x
struct AxpyKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class A>
  GEMMAX_KFN void operator()(X& x, E* y, A alpha, const E* v, int64_t n) const {
    GEMMAX_GRID_STRIDE(x, i, n) y[i] = from_acc<E>(to_acc(y[i]) + alpha * to_acc(v[i]));
  }
};

struct ScaleKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class A>
  GEMMAX_KFN void operator()(X& x, E* p, A alpha, int64_t n) const {
    GEMMAX_GRID_STRIDE(x, i, n) p[i] = from_acc<E>(to_acc(p[i]) * alpha);
  }
};

// y = x * keep(i) * scale (base/dropout_mask.h), in A (fp32, fp64 for fp64), rounded once.
struct DropoutKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class A>
  GEMMAX_KFN void operator()(X& x, E* y, const E* v, int64_t n, uint64_t seed, uint64_t threshold,
                             A scale) const {
    GEMMAX_GRID_STRIDE(x, i, n) {
      const A keep = dropout_keep(seed, uint64_t(i), threshold) ? scale : A(0);
      y[i] = from_double<E>(double(to_acc(v[i]) * keep));
    }
  }
};

// ---- ordered sums ------------------------------------------------------------------------
// A sum over n terms runs in two launches with a grid of fixed size: every block sums its
// grid-stride share in fp64 and writes one partial; one block then sums the partials. The order
// depends on n only, so results are bit-identical from run to run.
constexpr int kSumBlocks = 512, kSumThreads = 256;

template <class X>
GEMMAX_KFN void write_block_partial(X& x, double s, double* partial) {
  s = group_sum(x, s, x.nthreads(), x.template smem<double>());
  if (x.tid() == 0) partial[x.bx()] = s;
}

// partial[block] = sum of x_i^2 over the block's share.
struct SumSquaresKernel {
  static constexpr int kMaxThreads = kSumThreads;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, const E* v, int64_t n, double* partial) const {
    double s = 0;
    GEMMAX_GRID_STRIDE(x, i, n) {
      const double d = double(to_acc(v[i]));
      s += d * d;
    }
    write_block_partial(x, s, partial);
  }
};

// out[0] = out[0] + sum of the partials, rounded once to out's dtype (one block).
struct AddPartialsKernel {
  static constexpr int kMaxThreads = kSumThreads;
  template <class X, class W>
  GEMMAX_KFN void operator()(X& x, W* out, const double* partial, int count) const {
    double s = 0;
    for (int i = x.tid(); i < count; i += x.nthreads()) s += partial[i];
    s = group_sum(x, s, x.nthreads(), x.template smem<double>());
    if (x.tid() == 0) out[0] = from_double<W>(double(to_acc(out[0])) + s);
  }
};

// y = (a + b) * s[0]: the sum rounded to the activation dtype first (as a separate add), then
// scaled at the scale's precision and rounded once.
struct ScaledSumForwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class S>
  GEMMAX_KFN void operator()(X& x, E* y, const E* a, const E* b, const S* s, int64_t n) const {
    const double scale = double(to_acc(s[0]));
    GEMMAX_GRID_STRIDE(x, i, n) {
      const E ab = from_acc<E>(to_acc(a[i]) + to_acc(b[i]));
      y[i] = from_double<E>(double(to_acc(ab)) * scale);
    }
  }
};

// dab = dy * s[0]; partial[block] = sum over its share of dy_i (a_i + b_i).
struct ScaledSumBackwardKernel {
  static constexpr int kMaxThreads = kSumThreads;
  template <class X, class E, class S>
  GEMMAX_KFN void operator()(X& x, E* dab, const E* dy, const E* a, const E* b, const S* s,
                             int64_t n, double* partial) const {
    const double scale = double(to_acc(s[0]));
    double sum = 0;
    GEMMAX_GRID_STRIDE(x, i, n) {
      const double d = double(to_acc(dy[i]));
      sum += d * double(to_acc(from_acc<E>(to_acc(a[i]) + to_acc(b[i]))));
      dab[i] = from_double<E>(d * scale);
    }
    write_block_partial(x, sum, partial);
  }
};

// out[g] = in[g]^T through a 32 x 33 shared tile; grid (c tiles, r tiles, G), 256 threads.
struct TransposeKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* out, const E* in, int64_t R, int64_t C) const {
    E* tile = x.template smem<E>();
    const int64_t r0 = int64_t(x.by()) * 32, c0 = int64_t(x.bx()) * 32;
    const E* src = in + int64_t(x.bz()) * R * C;
    E* dst = out + int64_t(x.bz()) * R * C;
    for (int e = x.tid(); e < 32 * 32; e += x.nthreads()) {
      const int64_t r = r0 + e / 32, c = c0 + e % 32;
      if (r < R && c < C) tile[(e / 32) * 33 + e % 32] = src[r * C + c];
    }
    x.sync();
    for (int e = x.tid(); e < 32 * 32; e += x.nthreads()) {
      const int64_t c = c0 + e / 32, r = r0 + e % 32;
      if (r < R && c < C) dst[c * R + r] = tile[(e % 32) * 33 + e / 32];
    }
  }
};

// Records the first error a kernel finds (DeviceError); later ones are dropped.
template <class X>
GEMMAX_KFN void record_error(X& x, DeviceError* e, int32_t code, int32_t op, int64_t a, int64_t b,
                             int64_t c) {
  if (x.atomic_cas(&e->code, 0, -1) == 0) {
    e->op = op;
    e->a = a;
    e->b = b;
    e->c = c;
    x.fence();
    e->code = code;
  }
}

// ---- embedding ---------------------------------------------------------------------------

// out[t] = table[tokens[t]] * scale, one rounding; a token outside the vocabulary is recorded and
// its row zeroed. One block per token (grid-stride); V consecutive columns per thread at a time
// (kVec<E>, 16 bytes of the output per access, when the op layer found rows and addresses allow
// it; else 1).
struct EmbeddingForwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class W>
  GEMMAX_KFN void operator()(X& x, E* out, const int32_t* tokens, const W* table, int64_t n,
                             int64_t d, int64_t vocab, double scale, DeviceError* err,
                             bool vec) const {
    if (vec)
      run<kVec<E>>(x, out, tokens, table, n, d, vocab, scale, err);
    else
      run<1>(x, out, tokens, table, n, d, vocab, scale, err);
  }
  template <int V, class X, class E, class W>
  GEMMAX_KFN static void run(X& x, E* out, const int32_t* tokens, const W* table, int64_t n,
                             int64_t d, int64_t vocab, double scale, DeviceError* err) {
    for (int64_t t = x.bx(); t < n; t += x.gx()) {
      const int32_t tok = tokens[t];
      const bool ok = tok >= 0 && tok < vocab;
      if (!ok && x.tid() == 0)
        record_error(x, err, DeviceError::kTokenOutOfRange, kOpEmbedding, tok, t, vocab);
      for (int64_t i = int64_t(x.tid()) * V; i < d; i += int64_t(x.nthreads()) * V) {
        Pack<E, V> o;
        if (ok) {
          const Pack<W, V> w = load_wide<V>(table + int64_t(tok) * d + i);
          GEMMAX_UNROLL
          for (int e = 0; e < V; ++e) o.v[e] = from_double<E>(double(to_acc(w.v[e])) * scale);
        } else {
          GEMMAX_UNROLL
          for (int e = 0; e < V; ++e) o.v[e] = E{};
        }
        store_pack<V>(out + t * d + i, o);
      }
    }
  }
};

// dtable[token] += dx[t] * scale over the runs of equal tokens in `perm` (positions sorted by
// token, stably): each run's rows add in position order, each product rounded to the table's
// dtype first, as the reference's serial loop does. One block per run start (grid-stride); V
// consecutive columns per thread (kVec<E> when rows and addresses allow it, else 1).
struct EmbeddingBackwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class W, class E>
  GEMMAX_KFN void operator()(X& x, W* dtable, const E* dx, const int32_t* tokens,
                             const int32_t* perm, int64_t n, int64_t d, int64_t vocab, double scale,
                             bool vec) const {
    if (vec)
      run<kVec<E>>(x, dtable, dx, tokens, perm, n, d, vocab, scale);
    else
      run<1>(x, dtable, dx, tokens, perm, n, d, vocab, scale);
  }
  template <int V, class X, class W, class E>
  GEMMAX_KFN static void run(X& x, W* dtable, const E* dx, const int32_t* tokens,
                             const int32_t* perm, int64_t n, int64_t d, int64_t vocab,
                             double scale) {
    for (int64_t i = x.bx(); i < n; i += x.gx()) {
      const int32_t tok = tokens[perm[i]];
      if ((i > 0 && tokens[perm[i - 1]] == tok) || tok < 0 || tok >= vocab) continue;
      for (int64_t c = int64_t(x.tid()) * V; c < d; c += int64_t(x.nthreads()) * V) {
        W* out = dtable + int64_t(tok) * d + c;
        Pack<W, V> acc = load_wide<V>(out);
        for (int64_t j = i; j < n && tokens[perm[j]] == tok; ++j) {
          const Pack<E, V> g = load_pack<V>(dx + int64_t(perm[j]) * d + c);
          GEMMAX_UNROLL
          for (int e = 0; e < V; ++e) {
            const W gw = from_double<W>(double(to_acc(g.v[e])) * scale);
            acc.v[e] = from_acc<W>(to_acc(acc.v[e]) + to_acc(gw));
          }
        }
        store_wide<V>(out, acc);
      }
    }
  }
};

// ---- AdamW -------------------------------------------------------------------------------

struct AdamWArgs {
  double lr, b1, b2, eps, eps_root, weight_decay, clip_norm, bc1, bc2;
};


// optax's adamw in the accumulation type of the weights (fp32 for float32 and bfloat16, fp64 for
// float64), one rounding per stored value. Skips the update (nothing written) unless every step
// scalar is finite and no kernel has recorded an error this step. `vec`: every operand 16-byte
// aligned, so 16 bytes go per access (the same arithmetic per element either way).
struct AdamWKernel {
  static constexpr int kMaxThreads = 256;
  template <class A>
  struct Coef {
    A lr, b1, c1, b2, c2, inv_bc1, inv_bc2, eps, eps_root, wd, grad_scale;
  };
  template <class A, class T>
  GEMMAX_HD static void update(const Coef<A>& c, T& p, T g, T& m, T& v) {
    const A gi = A(to_acc(g)) * c.grad_scale;
    const A mi = c.b1 * A(to_acc(m)) + c.c1 * gi;
    const A vi = c.b2 * A(to_acc(v)) + c.c2 * gi * gi;
    m = from_acc_as<T>(mi);
    v = from_acc_as<T>(vi);
    const A upd = (mi * c.inv_bc1) / (ksqrt(vi * c.inv_bc2 + c.eps_root) + c.eps);
    const A pi = A(to_acc(p));
    p = from_acc_as<T>(pi - c.lr * (upd + c.wd * pi));
  }
  template <class T>
  GEMMAX_HD static T from_acc_as(acc_t<T> v) {
    if constexpr (sizeof(acc_t<T>) == 8)
      return from_double<T>(v);
    else
      return from_acc<T>(v);
  }
  template <class X, class T>
  GEMMAX_KFN void operator()(X& x, T* p, const T* g, T* m, T* v, int64_t n, AdamWArgs a,
                             const double* scalars, int count, int sumsq_slot,
                             const DeviceError* err, bool vec) const {
    using A = acc_t<T>;
    bool finite = err->code == 0;
    for (int i = 0; i < count; ++i) finite = finite && kfinite(scalars[i]);
    if (!finite) return;
    const double norm = ksqrt(scalars[sumsq_slot]);
    const double grad_scale = a.clip_norm > 0 && norm > a.clip_norm ? a.clip_norm / norm : 1.0;
    const Coef<A> c{A(a.lr),       A(a.b1),      A(1.0 - a.b1),  A(a.b2),
                    A(1.0 - a.b2), A(1.0 / a.bc1), A(1.0 / a.bc2), A(a.eps),
                    A(a.eps_root), A(a.weight_decay), A(grad_scale)};
    constexpr int W = kVec<T>;
    const int64_t nw = vec ? n / W : 0;
    GEMMAX_GRID_STRIDE(x, i, nw) {
      Pack<T, W> pp = load_pack<W>(p + W * i), mm = load_pack<W>(m + W * i),
                 vv = load_pack<W>(v + W * i);
      const Pack<T, W> gg = load_pack<W>(g + W * i);
      GEMMAX_UNROLL
      for (int e = 0; e < W; ++e) update(c, pp.v[e], gg.v[e], mm.v[e], vv.v[e]);
      store_pack<W>(p + W * i, pp);
      store_pack<W>(m + W * i, mm);
      store_pack<W>(v + W * i, vv);
    }
    GEMMAX_GRID_STRIDE(x, i, n - W * nw) {
      const int64_t j = W * nw + i;
      update(c, p[j], g[j], m[j], v[j]);
    }
  }
};

}  // namespace gemmax::kern

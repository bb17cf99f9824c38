// RMSNorm forward and backward, RoPE.
#pragma once

#include "gemmax/backend/cuda/kernels/elementwise.h"

namespace gemmax::kern {

// Rows of n elements, `width` threads per row (32, or a multiple of 32 dividing the block):
// block b handles rows b * per_block .. of the grid-stride sweep.
struct RowSlots {
  int width, per_block, slot, col;
  template <class X>
  GEMMAX_HD static RowSlots of(X& x, int width) {
    return {width, x.nthreads() / width, x.tid() / width, x.tid() % width};
  }
};

struct RmsNormForwardArgs {
  int64_t rows, n;
  double eps, out_scale;
  int width;
  bool round_before_scale;
};

// y = [residual +] x * rstd * w * out_scale (see Backend::rmsnorm_forward); rstd saved per row.
// V consecutive columns per thread at a time: kVec<E> (16 bytes of the activations per access)
// when the op layer found rows and addresses allow it, else 1.
struct RmsNormForwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class W>
  GEMMAX_KFN void operator()(X& x, E* y, float* rstd, const E* in, const W* w, const E* residual,
                             RmsNormForwardArgs a, bool vec) const {
    if (vec)
      run<kVec<E>>(x, y, rstd, in, w, residual, a);
    else
      run<1>(x, y, rstd, in, w, residual, a);
  }
  template <int V, class X, class E, class W>
  GEMMAX_KFN static void run(X& x, E* y, float* rstd, const E* in, const W* w, const E* residual,
                             const RmsNormForwardArgs& a) {
    const RowSlots s = RowSlots::of(x, a.width);
    float* red = x.template smem<float>();
    const int64_t sweeps = ceil_div(a.rows, int64_t(s.per_block) * x.gx());
    const int64_t first = int64_t(s.col) * V, step = int64_t(s.width) * V;
    for (int64_t sweep = 0; sweep < sweeps; ++sweep) {
      const int64_t r = (sweep * x.gx() + x.bx()) * s.per_block + s.slot;
      const bool live = r < a.rows;
      const E* xr = in + (live ? r : 0) * a.n;
      float ss = 0;
      if (live)
        for (int64_t i = first; i < a.n; i += step) {
          const Pack<E, V> xv = load_pack<V>(xr + i);
          GEMMAX_UNROLL
          for (int e = 0; e < V; ++e) {
            const float v = to_acc(xv.v[e]);
            ss += v * v;
          }
        }
      ss = group_sum(x, ss, s.width, red);
      if (!live) continue;
      const float rs = 1.0f / ksqrt(ss / float(a.n) + float(a.eps));
      if (s.col == 0) rstd[r] = rs;
      for (int64_t i = first; i < a.n; i += step) {
        const Pack<E, V> xv = load_pack<V>(xr + i);
        Pack<W, V> wv;
        if (w) wv = load_wide<V>(w + i);
        Pack<E, V> res, out;
        if (residual) res = load_pack<V>(residual + r * a.n + i);
        GEMMAX_UNROLL
        for (int e = 0; e < V; ++e) {
          const float wi = float((w ? double(to_acc(wv.v[e])) : 1.0) * a.out_scale);
          const float v = to_acc(xv.v[e]);
          const float normed = a.round_before_scale
                                   ? round_to<E>(round_to<E>(v * rs) * round_to<E>(wi))
                                   : v * rs * wi;
          out.v[e] =
              residual ? from_acc<E>(to_acc(res.v[e]) + round_to<E>(normed)) : from_acc<E>(normed);
        }
        store_pack<V>(y + r * a.n + i, out);
      }
    }
  }
};

struct RmsNormBackwardArgs {
  int64_t rows, n;
  double out_scale;
  int width;
  bool accumulate;
};

// dx (+)= rstd * (g - xhat * mean(g * xhat)), g = dy * w * out_scale. V as in the forward.
struct RmsNormBackwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class W>
  GEMMAX_KFN void operator()(X& x, E* dx, const E* dy, const E* in, const W* w, const float* rstd,
                             RmsNormBackwardArgs a, bool vec) const {
    if (vec)
      run<kVec<E>>(x, dx, dy, in, w, rstd, a);
    else
      run<1>(x, dx, dy, in, w, rstd, a);
  }
  template <int V, class X, class E, class W>
  GEMMAX_KFN static void run(X& x, E* dx, const E* dy, const E* in, const W* w, const float* rstd,
                             const RmsNormBackwardArgs& a) {
    const RowSlots s = RowSlots::of(x, a.width);
    float* red = x.template smem<float>();
    const int64_t sweeps = ceil_div(a.rows, int64_t(s.per_block) * x.gx());
    const int64_t first = int64_t(s.col) * V, step = int64_t(s.width) * V;
    // g = dy * w * out_scale for V columns.
    auto grads = [&](int64_t at, int64_t i) {
      const Pack<E, V> dv = load_pack<V>(dy + at + i);
      Pack<W, V> wv;
      if (w) wv = load_wide<V>(w + i);
      Pack<float, V> g;
      GEMMAX_UNROLL
      for (int e = 0; e < V; ++e)
        g.v[e] = to_acc(dv.v[e]) * float((w ? double(to_acc(wv.v[e])) : 1.0) * a.out_scale);
      return g;
    };
    for (int64_t sweep = 0; sweep < sweeps; ++sweep) {
      const int64_t r = (sweep * x.gx() + x.bx()) * s.per_block + s.slot;
      const bool live = r < a.rows;
      const int64_t base = (live ? r : 0) * a.n;
      const float rs = live ? rstd[r] : 0.0f;
      float dot = 0;
      if (live)
        for (int64_t i = first; i < a.n; i += step) {
          const Pack<float, V> g = grads(base, i);
          const Pack<E, V> xv = load_pack<V>(in + base + i);
          GEMMAX_UNROLL
          for (int e = 0; e < V; ++e) dot += g.v[e] * to_acc(xv.v[e]) * rs;
        }
      dot = group_sum(x, dot, s.width, red);
      if (!live) continue;
      const float mean = dot / float(a.n);
      for (int64_t i = first; i < a.n; i += step) {
        const Pack<float, V> g = grads(base, i);
        const Pack<E, V> xv = load_pack<V>(in + base + i);
        Pack<E, V> out;
        if (a.accumulate) out = load_pack<V>(dx + base + i);
        GEMMAX_UNROLL
        for (int e = 0; e < V; ++e) {
          const float d = rs * (g.v[e] - to_acc(xv.v[e]) * rs * mean);
          out.v[e] = from_acc<E>(a.accumulate ? to_acc(out.v[e]) + d : d);
        }
        store_pack<V>(dx + base + i, out);
      }
    }
  }
};

// partial[chunk][col] = sum over the chunk's rows of dy * x * rstd, rows in order. Grid (column
// tiles of V times the block size, chunks); chunk c covers rows [c * rows_per_chunk, ...). V
// consecutive columns per thread (kVec<E> when rows and addresses allow it, else 1).
struct RmsNormDwKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, float* partial, const E* dy, const E* in, const float* rstd,
                             int64_t rows, int64_t n, int64_t rows_per_chunk, bool vec) const {
    if (vec)
      run<kVec<E>>(x, partial, dy, in, rstd, rows, n, rows_per_chunk);
    else
      run<1>(x, partial, dy, in, rstd, rows, n, rows_per_chunk);
  }
  template <int V, class X, class E>
  GEMMAX_KFN static void run(X& x, float* partial, const E* dy, const E* in, const float* rstd,
                             int64_t rows, int64_t n, int64_t rows_per_chunk) {
    const int64_t col = (int64_t(x.bx()) * x.nthreads() + x.tid()) * V;
    if (col >= n) return;
    const int64_t r0 = int64_t(x.by()) * rows_per_chunk, r1 = kmin(rows, r0 + rows_per_chunk);
    float s[V] = {};
    for (int64_t r = r0; r < r1; ++r) {
      const Pack<E, V> dv = load_pack<V>(dy + r * n + col), xv = load_pack<V>(in + r * n + col);
      GEMMAX_UNROLL
      for (int e = 0; e < V; ++e) s[e] += to_acc(dv.v[e]) * to_acc(xv.v[e]) * rstd[r];
    }
    Pack<float, V> out;
    GEMMAX_UNROLL
    for (int e = 0; e < V; ++e) out.v[e] = s[e];
    store_wide<V>(partial + int64_t(x.by()) * n + col, out);
  }
};

// w[col] += scale * sum over chunks of partial[chunk][col], in chunk order, in w's dtype.
struct AddColumnPartialsKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class W>
  GEMMAX_KFN void operator()(X& x, W* w, const float* partial, int64_t chunks, int64_t n,
                             double scale) const {
    GEMMAX_GRID_STRIDE(x, col, n) {
      double s = 0;
      for (int64_t c = 0; c < chunks; ++c) s += double(partial[c * n + col]);
      w[col] = from_double<W>(double(to_acc(w[col])) + s * scale);
    }
  }
};

// ---- RoPE --------------------------------------------------------------------------------

// table[t, i] = (cos, sin) of positions[t] * inv_freq[i], the angle in fp64.
struct RopeTableKernel {
  static constexpr int kMaxThreads = 256;
  template <class X>
  GEMMAX_KFN void operator()(X& x, float* table, const int32_t* positions, const double* inv_freq,
                             int64_t tokens, int64_t half) const {
    GEMMAX_GRID_STRIDE(x, e, tokens * half) {
      double sn, cs;
      ksincos(double(positions[e / half]) * inv_freq[e % half], &sn, &cs);
      table[2 * e] = float(cs);
      table[2 * e + 1] = float(sn);
    }
  }
};

// x[t, h, i], x[t, h, i + half] rotate by the table's angle (t, i); backward: by minus it. One
// warp per (token, head) row, so that nothing is divided per element.
struct RopeKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* v, const float* table, int64_t tokens, int64_t heads,
                             int64_t half, bool inverse) const {
    const int warps = x.nthreads() / kWarp;
    for (int64_t th = int64_t(x.bx()) * warps + x.tid() / kWarp; th < tokens * heads;
         th += int64_t(x.gx()) * warps) {
      const float* angle = table + 2 * (th / heads) * half;
      E* p = v + th * 2 * half;
      for (int64_t i = x.lane(); i < half; i += kWarp) {
        const float cs = angle[2 * i], sn = inverse ? -angle[2 * i + 1] : angle[2 * i + 1];
        const float a = to_acc(p[i]), b = to_acc(p[i + half]);
        p[i] = from_acc<E>(a * cs - b * sn);
        p[i + half] = from_acc<E>(b * cs + a * sn);
      }
    }
  }
};

}  // namespace gemmax::kern

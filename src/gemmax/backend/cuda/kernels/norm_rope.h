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
struct RmsNormForwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class W>
  GEMMAX_KFN void operator()(X& x, E* y, float* rstd, const E* in, const W* w, const E* residual,
                             RmsNormForwardArgs a) const {
    const RowSlots s = RowSlots::of(x, a.width);
    float* red = x.template smem<float>();
    const int64_t sweeps = ceil_div(a.rows, int64_t(s.per_block) * x.gx());
    for (int64_t sweep = 0; sweep < sweeps; ++sweep) {
      const int64_t r = (sweep * x.gx() + x.bx()) * s.per_block + s.slot;
      const bool live = r < a.rows;
      const E* xr = in + (live ? r : 0) * a.n;
      float ss = 0;
      if (live)
        for (int64_t i = s.col; i < a.n; i += s.width) {
          const float v = to_acc(xr[i]);
          ss += v * v;
        }
      ss = group_sum(x, ss, s.width, red);
      if (!live) continue;
      const float rs = 1.0f / ksqrt(ss / float(a.n) + float(a.eps));
      if (s.col == 0) rstd[r] = rs;
      for (int64_t i = s.col; i < a.n; i += s.width) {
        const float wi = float((w ? double(to_acc(w[i])) : 1.0) * a.out_scale);
        const float v = to_acc(xr[i]);
        const float normed =
            a.round_before_scale ? round_to<E>(round_to<E>(v * rs) * round_to<E>(wi)) : v * rs * wi;
        y[r * a.n + i] = residual ? from_acc<E>(to_acc(residual[r * a.n + i]) + round_to<E>(normed))
                                  : from_acc<E>(normed);
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

// dx (+)= rstd * (g - xhat * mean(g * xhat)), g = dy * w * out_scale.
struct RmsNormBackwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E, class W>
  GEMMAX_KFN void operator()(X& x, E* dx, const E* dy, const E* in, const W* w, const float* rstd,
                             RmsNormBackwardArgs a) const {
    const RowSlots s = RowSlots::of(x, a.width);
    float* red = x.template smem<float>();
    const int64_t sweeps = ceil_div(a.rows, int64_t(s.per_block) * x.gx());
    for (int64_t sweep = 0; sweep < sweeps; ++sweep) {
      const int64_t r = (sweep * x.gx() + x.bx()) * s.per_block + s.slot;
      const bool live = r < a.rows;
      const int64_t base = (live ? r : 0) * a.n;
      const float rs = live ? rstd[r] : 0.0f;
      float dot = 0;
      if (live)
        for (int64_t i = s.col; i < a.n; i += s.width) {
          const float g =
              to_acc(dy[base + i]) * float((w ? double(to_acc(w[i])) : 1.0) * a.out_scale);
          dot += g * to_acc(in[base + i]) * rs;
        }
      dot = group_sum(x, dot, s.width, red);
      if (!live) continue;
      const float mean = dot / float(a.n);
      for (int64_t i = s.col; i < a.n; i += s.width) {
        const float g =
            to_acc(dy[base + i]) * float((w ? double(to_acc(w[i])) : 1.0) * a.out_scale);
        const float d = rs * (g - to_acc(in[base + i]) * rs * mean);
        dx[base + i] = from_acc<E>(a.accumulate ? to_acc(dx[base + i]) + d : d);
      }
    }
  }
};

// partial[chunk][col] = sum over the chunk's rows of dy * x * rstd. Grid (column tiles of the
// block size, chunks); chunk c covers rows [c * rows_per_chunk, ...).
struct RmsNormDwKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, float* partial, const E* dy, const E* in, const float* rstd,
                             int64_t rows, int64_t n, int64_t rows_per_chunk) const {
    const int64_t col = int64_t(x.bx()) * x.nthreads() + x.tid();
    if (col >= n) return;
    const int64_t r0 = int64_t(x.by()) * rows_per_chunk, r1 = kmin(rows, r0 + rows_per_chunk);
    float s = 0;
    for (int64_t r = r0; r < r1; ++r)
      s += to_acc(dy[r * n + col]) * to_acc(in[r * n + col]) * rstd[r];
    partial[int64_t(x.by()) * n + col] = s;
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

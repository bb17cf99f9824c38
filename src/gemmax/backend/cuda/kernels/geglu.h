// GeGLU forward and backward.
#pragma once

#include "gemmax/backend/cuda/kernels/elementwise.h"

namespace gemmax::kern {

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
GEMMAX_HD float gelu_tanh(float v) {
  return 0.5f * v * (1.0f + ktanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
}
GEMMAX_HD float gelu_tanh_grad(float v) {
  const float tau = ktanh(kSqrt2OverPi * (v + 0.044715f * v * v * v));
  return 0.5f * (1.0f + tau) +
         0.5f * v * (1.0f - tau * tau) * kSqrt2OverPi * (1.0f + 0.134145f * v * v);
}

// Rows of gate and up: fused [gate | up] (up = gate + F, stride 2F) or two tensors (stride F).
// round_gelu: gelu(gate), and in the backward its gradient da up, rounded to E (GegluForwardArgs).
struct GegluArgs {
  int64_t m, F, stride;
  bool round_gelu = false;
};
template <class E>
GEMMAX_HD float round_if(bool round, float v) {
  return round ? to_acc(from_acc<E>(v)) : v;
}

// One warp per row, W consecutive columns per lane at a time (kVec<E>: 16 bytes per access,
// when the op layer found rows and addresses allow it; else 1): nothing divided per element.
template <int W, class X, class F>
GEMMAX_KFN void geglu_rows(X& x, const GegluArgs& a, F&& f) {
  const int warps = x.nthreads() / kWarp;
  for (int64_t r = int64_t(x.bx()) * warps + x.tid() / kWarp; r < a.m;
       r += int64_t(x.gx()) * warps)
    for (int64_t j = int64_t(x.lane()) * W; j < a.F; j += int64_t(kWarp) * W) f(r, j);
}

struct GegluForwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* act, const E* gate, const E* up, GegluArgs a,
                             bool vec) const {
    if (vec)
      run<kVec<E>>(x, act, gate, up, a);
    else
      run<1>(x, act, gate, up, a);
  }
  template <int W, class X, class E>
  GEMMAX_KFN static void run(X& x, E* act, const E* gate, const E* up, const GegluArgs& a) {
    geglu_rows<W>(x, a, [&](int64_t r, int64_t j) {
      const Pack<E, W> g = load_pack<W>(gate + r * a.stride + j),
                       u = load_pack<W>(up + r * a.stride + j);
      Pack<E, W> o;
      GEMMAX_UNROLL
      for (int e = 0; e < W; ++e)
        o.v[e] = from_acc<E>(round_if<E>(a.round_gelu, gelu_tanh(to_acc(g.v[e]))) * to_acc(u.v[e]));
      store_pack<W>(act + r * a.F + j, o);
    });
  }
};

// dgate, dup may be null (not written).
struct GegluBackwardKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* dgate, E* dup, const E* dact, const E* gate, const E* up,
                             GegluArgs a, bool vec) const {
    if (vec)
      run<kVec<E>>(x, dgate, dup, dact, gate, up, a);
    else
      run<1>(x, dgate, dup, dact, gate, up, a);
  }
  template <int W, class X, class E>
  GEMMAX_KFN static void run(X& x, E* dgate, E* dup, const E* dact, const E* gate, const E* up,
                             const GegluArgs& a) {
    geglu_rows<W>(x, a, [&](int64_t r, int64_t j) {
      const int64_t at = r * a.stride + j;
      const Pack<E, W> g = load_pack<W>(gate + at), u = load_pack<W>(up + at),
                       d = load_pack<W>(dact + r * a.F + j);
      Pack<E, W> dg, du;
      GEMMAX_UNROLL
      for (int e = 0; e < W; ++e) {
        const float ge = to_acc(g.v[e]), ue = to_acc(u.v[e]), de = to_acc(d.v[e]);
        dg.v[e] = from_acc<E>(round_if<E>(a.round_gelu, de * ue) * gelu_tanh_grad(ge));
        du.v[e] = from_acc<E>(de * round_if<E>(a.round_gelu, gelu_tanh(ge)));
      }
      if (dgate) store_pack<W>(dgate + at, dg);
      if (dup) store_pack<W>(dup + at, du);
    });
  }
};

}  // namespace gemmax::kern

// GeGLU ops.
#pragma once

#include "gemmax/backend/cuda/kernels/geglu.h"
#include "gemmax/backend/cuda/ops/common.h"

namespace gemmax::cuda::ops {

struct GegluLayout {
  kern::GegluArgs args;
  bool split;
};
inline GegluLayout geglu_layout(const GegluDims& d) { return {{d.m, d.F, d.stride}, d.split}; }

template <class P>
void geglu_forward(P& p, const GegluForwardArgs& args, GegluDims dims) {
  const auto& [a, h, up, round_gelu] = args;
  GegluLayout g = geglu_layout(dims);
  g.args.round_gelu = round_gelu;
  if (a.numel() == 0) return;
  dispatch<float, bf16>(a, "geglu_forward", [&]<class E>() {
    const E* gate = ptr<E>(h);
    const E* u = g.split ? (const E*)ptr<E>(up) : gate + g.args.F;
    const bool vec = vec_ok<E>(g.args.F, {&a, &h, &up});  // rows of F, so stride 2F too
    p.template launch<kern::GegluForwardKernel>(stride_launch(g.args.m * 32, 256, 65536), ptr<E>(a),
                                                gate, u, g.args, vec);
  });
}

template <class P>
void geglu_backward(P& p, const GegluBackwardArgs& args, GegluDims dims) {
  const auto& [dh, dup, da, h, up, round_gelu] = args;
  GegluLayout g = geglu_layout(dims);
  g.args.round_gelu = round_gelu;
  if (da.numel() == 0) return;
  dispatch<float, bf16>(da, "geglu_backward", [&]<class E>() {
    const E* gate = ptr<E>(h);
    const E* u = g.split ? (const E*)ptr<E>(up) : gate + g.args.F;
    E* dgate = ptr<E>(dh);
    E* du = g.split ? ptr<E>(dup) : dgate + g.args.F;
    const bool vec = vec_ok<E>(g.args.F, {&dh, &dup, &da, &h, &up});
    p.template launch<kern::GegluBackwardKernel>(stride_launch(g.args.m * 32, 256, 65536), dgate,
                                                 du, (const E*)ptr<E>(da), gate, u, g.args, vec);
  });
}

}  // namespace gemmax::cuda::ops

// GeGLU: a = gelu_tanh(gate) up, and its gradient, row by row.
#include <cmath>

#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"

namespace gemmax {
using namespace cpu;

namespace {

// Round: gelu(gate) rounded to T before the product (activations_in_float32=false).
template <bool Round, class T>
GEMMAX_SIMD_BODY void geglu_row(T* a, const T* gate, const T* up, int64_t F) {
#pragma omp simd
  for (int64_t j = 0; j < F; ++j) {
    const float gelu = gelu_tanh(to_f32(gate[j]));
    a[j] = from_f32<T>((Round ? to_f32(from_f32<T>(gelu)) : gelu) * to_f32(up[j]));
  }
}
template <bool Round, class T>
GEMMAX_AVX512 void geglu_row_avx512(T* a, const T* gate, const T* up, int64_t F) {
  geglu_row<Round>(a, gate, up, F);
}

// dgate = da up gelu'(gate), dup = da gelu(gate); either may be null (not needed). Round: the
// rounded gelu in dup, and da up (the gradient of the rounded gelu) rounded before gelu'.
template <bool Round, class T>
GEMMAX_SIMD_BODY void geglu_grad_row(T* dgate, T* dup, const T* da, const T* gate, const T* up,
                                     int64_t F) {
  if (dgate) {
#pragma omp simd
    for (int64_t j = 0; j < F; ++j) {
      const float dgelu = to_f32(da[j]) * to_f32(up[j]);
      dgate[j] = from_f32<T>((Round ? to_f32(from_f32<T>(dgelu)) : dgelu) *
                             gelu_tanh_grad(to_f32(gate[j])));
    }
  }
  if (dup) {
#pragma omp simd
    for (int64_t j = 0; j < F; ++j) {
      const float gelu = gelu_tanh(to_f32(gate[j]));
      dup[j] = from_f32<T>(to_f32(da[j]) * (Round ? to_f32(from_f32<T>(gelu)) : gelu));
    }
  }
}
template <bool Round, class T>
GEMMAX_AVX512 void geglu_grad_row_avx512(T* dgate, T* dup, const T* da, const T* gate, const T* up,
                                         int64_t F) {
  geglu_grad_row<Round>(dgate, dup, da, gate, up, F);
}

}  // namespace

// ---- GeGLU ------------------------------------------------------------------------------------

void CpuBackend::do_geglu_forward(const GegluForwardArgs& args, GegluDims g) {
  const auto& [a, h, up, round_gelu] = args;
  if (is_wide(a)) return reference_.do_geglu_forward(args, g);
  const bool avx512 = wide_vectors(isa_);
  dispatch<float, bf16>(a, "geglu_forward", [&]<class T>() {
    const T* pg = h.data<T>();
    const T* pu = g.split ? up.data<T>() : pg + g.F;
    T* pa = a.data<T>();
    const int64_t F = g.F, stride = g.stride;
    const auto row = avx512 ? (round_gelu ? geglu_row_avx512<true, T> : geglu_row_avx512<false, T>)
                            : (round_gelu ? geglu_row<true, T> : geglu_row<false, T>);
#pragma omp parallel for if (g.m > kParallelRows)
    for (int64_t r = 0; r < g.m; ++r) row(pa + r * F, pg + r * stride, pu + r * stride, F);
  });
}

void CpuBackend::do_geglu_backward(const GegluBackwardArgs& args, GegluDims g) {
  const auto& [dh, dup, da, h, up, round_gelu] = args;
  if (is_wide(da)) return reference_.do_geglu_backward(args, g);
  const bool avx512 = wide_vectors(isa_);
  dispatch<float, bf16>(da, "geglu_backward", [&]<class T>() {
    const T* pg = h.data<T>();
    const T* pu = g.split ? up.data<T>() : pg + g.F;
    const T* pda = da.data<T>();
    T* pdg = dh.defined() ? dh.data<T>() : nullptr;
    T* pdu = g.split ? (dup.defined() ? dup.data<T>() : nullptr) : pdg + g.F;
    const int64_t F = g.F, stride = g.stride;
    const auto row = avx512 ? (round_gelu ? geglu_grad_row_avx512<true, T>
                                          : geglu_grad_row_avx512<false, T>)
                            : (round_gelu ? geglu_grad_row<true, T> : geglu_grad_row<false, T>);
#pragma omp parallel for if (g.m > kParallelRows)
    for (int64_t r = 0; r < g.m; ++r) {
      T* dgr = pdg ? pdg + r * stride : nullptr;
      T* dur = pdu ? pdu + r * stride : nullptr;
      row(dgr, dur, pda + r * F, pg + r * stride, pu + r * stride, F);
    }
  });
}

}  // namespace gemmax

// GeGLU: a = gelu_tanh(gate) up, and its gradient, row by row.
#include <cmath>

#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"

namespace gemmax {
using namespace cpu;

namespace {

struct GegluRows {
  int64_t m, F, stride;
  bool split;
};

GegluRows geglu_rows(const Tensor& a, const Tensor& h, const Tensor& up, const char* op) {
  const int64_t F = a.dim(-1), m = a.numel() / F;
  const bool split = up.defined();
  GEMMAX_CHECK(split ? h.numel() == m * F && up.numel() == m * F : h.numel() == 2 * m * F, op,
               ": h ", h.str(), " for a ", a.str());
  return {m, F, split ? F : 2 * F, split};
}

template <class T>
GEMMAX_SIMD_BODY void geglu_row(T* a, const T* gate, const T* up, int64_t F) {
#pragma omp simd
  for (int64_t j = 0; j < F; ++j) a[j] = from_f32<T>(gelu_tanh(to_f32(gate[j])) * to_f32(up[j]));
}
template <class T>
GEMMAX_AVX512 void geglu_row_avx512(T* a, const T* gate, const T* up, int64_t F) {
  geglu_row(a, gate, up, F);
}

// dgate = da up gelu'(gate), dup = da gelu(gate); either may be null (not needed).
template <class T>
GEMMAX_SIMD_BODY void geglu_grad_row(T* dgate, T* dup, const T* da, const T* gate, const T* up,
                                     int64_t F) {
  if (dgate) {
#pragma omp simd
    for (int64_t j = 0; j < F; ++j)
      dgate[j] = from_f32<T>(to_f32(da[j]) * to_f32(up[j]) * gelu_tanh_grad(to_f32(gate[j])));
  }
  if (dup) {
#pragma omp simd
    for (int64_t j = 0; j < F; ++j)
      dup[j] = from_f32<T>(to_f32(da[j]) * gelu_tanh(to_f32(gate[j])));
  }
}
template <class T>
GEMMAX_AVX512 void geglu_grad_row_avx512(T* dgate, T* dup, const T* da, const T* gate, const T* up,
                                         int64_t F) {
  geglu_grad_row(dgate, dup, da, gate, up, F);
}

}  // namespace

// ---- GeGLU ------------------------------------------------------------------------------------

void CpuBackend::do_geglu_forward(const GegluForwardArgs& args) {
  const auto& [a, h, up] = args;
  if (is_wide(a)) return reference_.do_geglu_forward(args);
  const GegluRows g = geglu_rows(a, h, up, "geglu_forward");
  const bool avx512 = wide_vectors(isa_);
  dispatch<float, bf16>(a, "geglu_forward", [&]<class T>() {
    const T* pg = h.data<T>();
    const T* pu = g.split ? up.data<T>() : pg + g.F;
    T* pa = a.data<T>();
    const int64_t F = g.F, stride = g.stride;
#pragma omp parallel for if (g.m > kParallelRows)
    for (int64_t r = 0; r < g.m; ++r) {
      if (avx512)
        geglu_row_avx512(pa + r * F, pg + r * stride, pu + r * stride, F);
      else
        geglu_row(pa + r * F, pg + r * stride, pu + r * stride, F);
    }
  });
}

void CpuBackend::do_geglu_backward(const GegluBackwardArgs& args) {
  const auto& [dh, dup, da, h, up] = args;
  if (is_wide(da)) return reference_.do_geglu_backward(args);
  const GegluRows g = geglu_rows(da, h, up, "geglu_backward");
  const bool avx512 = wide_vectors(isa_);
  dispatch<float, bf16>(da, "geglu_backward", [&]<class T>() {
    const T* pg = h.data<T>();
    const T* pu = g.split ? up.data<T>() : pg + g.F;
    const T* pda = da.data<T>();
    T* pdg = dh.defined() ? dh.data<T>() : nullptr;
    T* pdu = g.split ? (dup.defined() ? dup.data<T>() : nullptr) : pdg + g.F;
    const int64_t F = g.F, stride = g.stride;
#pragma omp parallel for if (g.m > kParallelRows)
    for (int64_t r = 0; r < g.m; ++r) {
      T* dgr = pdg ? pdg + r * stride : nullptr;
      T* dur = pdu ? pdu + r * stride : nullptr;
      if (avx512)
        geglu_grad_row_avx512(dgr, dur, pda + r * F, pg + r * stride, pu + r * stride, F);
      else
        geglu_grad_row(dgr, dur, pda + r * F, pg + r * stride, pu + r * stride, F);
    }
  });
}

}  // namespace gemmax

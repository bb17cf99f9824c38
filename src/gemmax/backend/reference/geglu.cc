// GeGLU with tanh-approximate GELU on fused [gate | up] rows.
#include <cmath>

#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)

inline double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

// d/dx gelu_tanh(x) = 0.5 (1 + tau) + 0.5 x (1 - tau^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
inline double gelu_tanh_grad(double x) {
  const double tau = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + tau) + 0.5 * x * (1.0 - tau * tau) * kSqrt2OverPi * (1.0 + 0.134145 * x * x);
}

}  // namespace

void ReferenceBackend::do_geglu_forward(const GegluForwardArgs& args, GegluDims g) {
  const auto& [a, h, up, round_gelu] = args;
  dispatch<float, bf16, double>(a, "geglu_forward", [&]<class T>() {
    const T* pg = h.data<T>();
    const T* pu = g.split ? up.data<T>() : pg + g.F;
    T* pa = a.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t j = 0; j < g.F; ++j) {
        const double gelu = gelu_tanh(double(pg[r * g.stride + j]));
        pa[r * g.F + j] = T((round_gelu ? double(T(gelu)) : gelu) * double(pu[r * g.stride + j]));
      }
  });
}

void ReferenceBackend::do_geglu_backward(const GegluBackwardArgs& args, GegluDims g) {
  const auto& [dh, dup, da, h, up, round_gelu] = args;
  dispatch<float, bf16, double>(da, "geglu_backward", [&]<class T>() {
    const T* pg = h.data<T>();
    const T* pu = g.split ? up.data<T>() : pg + g.F;
    const T* pda = da.data<T>();
    T* pdg = dh.defined() ? dh.data<T>() : nullptr;
    T* pdu = g.split ? (dup.defined() ? dup.data<T>() : nullptr) : pdg + g.F;
#pragma omp parallel for
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t j = 0; j < g.F; ++j) {
        const double gate = double(pg[r * g.stride + j]), upv = double(pu[r * g.stride + j]);
        const double d = double(pda[r * g.F + j]);
        if (round_gelu) {  // the rounded gelu's value and its gradient, each rounded
          if (pdg) pdg[r * g.stride + j] = T(double(T(d * upv)) * gelu_tanh_grad(gate));
          if (pdu) pdu[r * g.stride + j] = T(d * double(T(gelu_tanh(gate))));
          continue;
        }
        if (pdg) pdg[r * g.stride + j] = T(d * upv * gelu_tanh_grad(gate));
        if (pdu) pdu[r * g.stride + j] = T(d * gelu_tanh(gate));
      }
  });
}

}  // namespace gemmax

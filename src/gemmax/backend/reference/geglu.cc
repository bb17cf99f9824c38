// GeGLU with tanh-approximate GELU on fused [gate | up] rows.
#include <cmath>

#include "gemmax/backend/reference/dispatch.h"
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

void ReferenceBackend::geglu_forward(const Tensor& a, const Tensor& h) {
  const int64_t F = a.dim(-1), m = a.numel() / F;
  GEMMAX_CHECK(h.numel() == 2 * m * F, "geglu_forward: h ", h.str(), " for a ", a.str());
  ref::dispatch_float(a, [&]<class T>() {
    const T* ph = h.data<T>();
    T* pa = a.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < F; ++j)
        pa[r * F + j] = T(gelu_tanh(double(ph[r * 2 * F + j])) * double(ph[r * 2 * F + F + j]));
  });
}

void ReferenceBackend::geglu_backward(const Tensor& dh, const Tensor& da, const Tensor& h) {
  const int64_t F = da.dim(-1), m = da.numel() / F;
  GEMMAX_CHECK(h.numel() == 2 * m * F && dh.numel() == h.numel(), "geglu_backward: h ", h.str(),
               " dh ", dh.str(), " da ", da.str());
  ref::dispatch_float(da, [&]<class T>() {
    const T *ph = h.data<T>(), *pda = da.data<T>();
    T* pdh = dh.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < F; ++j) {
        const double gate = double(ph[r * 2 * F + j]), up = double(ph[r * 2 * F + F + j]);
        const double g = double(pda[r * F + j]);
        pdh[r * 2 * F + j] = T(g * up * gelu_tanh_grad(gate));
        pdh[r * 2 * F + F + j] = T(g * gelu_tanh(gate));
      }
  });
}

}  // namespace gemmax

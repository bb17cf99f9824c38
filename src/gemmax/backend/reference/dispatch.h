// Helpers shared by the reference kernels: dtype dispatch and shape checks.
#pragma once

#include <type_traits>

#include "gemmax/base/error.h"
#include "gemmax/base/tensor.h"

namespace gemmax::ref {

// Statistics (rstd, log-sum-exp, router probabilities) of an activation type T.
template <class T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Calls f.template operator()<T>() with T the C++ type of a float tensor's elements.
template <class F>
void dispatch_float(const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::F32: f.template operator()<float>(); return;
    case DType::F64: f.template operator()<double>(); return;
    default: fail("reference backend: ", t.str(), " is not supported; use float32 or float64");
  }
}

inline void check_same(const Tensor& a, const Tensor& b, const char* what) {
  GEMMAX_CHECK(a.dtype() == b.dtype() && a.numel() == b.numel(), what, ": ", a.str(), " vs ",
               b.str());
}

}  // namespace gemmax::ref

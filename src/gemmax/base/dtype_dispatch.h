// The one dtype dispatch of every backend: runs f.template operator()<T>() with T the C++ element
// type of a tensor (float, double, bf16, int32_t, ...), among the types the call site accepts:
//
//   dispatch<float, bf16>(x, "rmsnorm_forward", [&]<class T>() { ... x.data<T>() ... });
//
// Any other dtype fails with one message naming the op, the tensor and the accepted dtypes.
#pragma once

#include <initializer_list>
#include <string_view>

#include "gemmax/base/tensor.h"

namespace gemmax {

// The error of a dtype that no accepted type matches (float64 tensors are told where they run).
[[noreturn]] void fail_dtype(std::string_view op, const Tensor& t,
                             std::initializer_list<DType> accepted);

template <class... Ts, class F>
void dispatch(const Tensor& t, std::string_view op, F&& f) {
  static_assert(sizeof...(Ts) > 0, "dispatch: name the element types the op accepts");
  const DType d = t.dtype();
  const bool ran = ((d == dtype_of<Ts>() && (f.template operator()<Ts>(), true)) || ...);
  if (!ran) fail_dtype(op, t, {dtype_of<Ts>()...});
}

// Two tensors that may differ in dtype (bf16 inputs and a float32 weight gradient, a float32 table
// and bf16 rows): runs f.template operator()<A, B>(), A of a and B of b, each one of Ts.
template <class... Ts, class F>
void dispatch2(const Tensor& a, const Tensor& b, std::string_view op, F&& f) {
  dispatch<Ts...>(a, op, [&]<class A>() {
    dispatch<Ts...>(b, op, [&]<class B>() { f.template operator()<A, B>(); });
  });
}

}  // namespace gemmax

// What every op declaration (the headers beside this one) shares.
//
// An op is an argument struct, built at the call with designated initialisers
// (`be.gmm({.out = y, .lhs = x, .rhs = w, .group_sizes = gs})`), and one `validate` that checks
// its contract (shapes, dtypes, the accumulation rule) once, before any backend runs. The struct's
// tensor fields are references to the caller's tensors: build it in the call, never keep it.
// A field without a default is required (omitting it does not compile); an optional tensor
// defaults to kNoTensor, an undefined tensor.
//
// A validate that works out sizes from the operands (a row count, a weight window) returns them,
// and do_<op> receives them (OpDims), so that no backend derives them again; a validate that
// derives nothing returns void, and its do_<op> receives NoDims.
//
// Each header lists its ops in an X-macro, X(name, Args, family): backend/ops/op_list.h joins the
// lists, and the Backend interface, the planning and profiling decorators, the cuda kernel backend
// and the cuda instantiations are written from them.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "gemmax/base/tensor.h"

namespace gemmax {

inline const Tensor kNoTensor{};

// The parts of a training step that `gemmax bench` splits its time by
// (backend/profiling_backend.h).
enum class OpFamily : uint8_t {
  Matmul,
  GroupedMatmul,
  Attention,
  NormsElementwise,
  RoutingPermute,
  HeadLoss,
  Optimizer,
  kCount
};

struct NoDims {};

namespace op_detail {
template <class D>
struct Dims {
  using type = D;
};
template <>
struct Dims<void> {
  using type = NoDims;
};
}  // namespace op_detail

// What validate(const Args&) returns, NoDims for void.
template <class Args>
using OpDims = typename op_detail::Dims<decltype(validate(std::declval<const Args&>()))>::type;

// Checks args (validate) and returns its dims.
template <class Args>
OpDims<Args> validated(const Args& args) {
  if constexpr (std::is_void_v<decltype(validate(args))>) {
    validate(args);
    return {};
  } else {
    return validate(args);
  }
}

// fp64 runs (gradient checks) keep fp64 statistics; everything else keeps fp32.
inline DType stat_dtype(DType activation) {
  return activation == DType::F64 ? DType::F64 : DType::F32;
}

}  // namespace gemmax

// What every op declaration (the headers beside this one) shares.
//
// An op is an argument struct, built at the call with designated initialisers
// (`be.gmm({.out = y, .lhs = x, .rhs = w, .group_sizes = gs})`), and one `validate` that checks
// its contract (shapes, dtypes, the accumulation rule) once, before any backend runs. The struct's
// tensor fields are references to the caller's tensors: build it in the call, never keep it.
// A field without a default is required (omitting it does not compile); an optional tensor
// defaults to kNoTensor, an undefined tensor.
//
// Each header lists its ops in an X-macro, X(name, Args, family): backend/ops/op_list.h joins the
// lists, and the Backend interface, the planning and profiling decorators, the cuda kernel backend
// and the cuda instantiations are written from them.
#pragma once

#include <cstdint>

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

// fp64 runs (gradient checks) keep fp64 statistics; everything else keeps fp32.
inline DType stat_dtype(DType activation) {
  return activation == DType::F64 ? DType::F64 : DType::F32;
}

}  // namespace gemmax

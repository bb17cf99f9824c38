// Helpers of the ops' validate functions (this folder's .cc files). A validate reads shapes and
// dtypes only, never data: planned tensors have none, and device tensors are not host memory.
#pragma once

#include "gemmax/base/error.h"
#include "gemmax/base/tensor.h"

namespace gemmax::op_check {

inline void same_dtype(const Tensor& a, const Tensor& b, const Tensor& c, const char* op) {
  GEMMAX_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), op, " dtypes differ: ", a.str(),
               " ", b.str(), " ", c.str());
}

// Same dtype and element count.
inline void same(const Tensor& a, const Tensor& b, const char* op) {
  GEMMAX_CHECK(a.dtype() == b.dtype() && a.numel() == b.numel(), op, ": ", a.str(), " vs ",
               b.str());
}

inline std::string str_or(const Tensor& t, const char* none) {
  return t.defined() ? t.str() : std::string(none);
}

}  // namespace gemmax::op_check

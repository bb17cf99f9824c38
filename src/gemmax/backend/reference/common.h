// Helpers shared by the reference kernels: mixed-dtype access and shape checks.
//
// Element types: float32, float64 and bfloat16. Kernels read every element as double, sum in
// fp64 and round once to the output's dtype, so a bf16 kernel gives the correctly rounded
// result of the exact computation on its bf16 inputs ("fp32 accumulation" or better).
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "gemmax/base/dtype_dispatch.h"
#include "gemmax/base/error.h"
#include "gemmax/base/tensor.h"

namespace gemmax::ref {

// Statistics (rstd, log-sum-exp, router probabilities) of an activation type T: fp32, or
// fp64 in fp64 runs.
template <class T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The type elementwise arithmetic on T runs in: T itself for fp32/fp64 (bit for bit what
// these kernels always did); bf16 has no arithmetic, so fp64 with one rounding at the end.
template <class T>
using calc_t = std::conditional_t<std::is_same_v<T, bf16>, double, T>;

// A small weight vector (norm scale, per-expert scale) of any float dtype, read into fp64 once
// per call: with fp32 master weights and bf16 activations the scale is applied at full
// precision before the one rounding of the output (seed change 2). Empty if undefined.
inline std::vector<double> read_vector(const Tensor& t) {
  std::vector<double> v;
  if (!t.defined()) return v;
  v.resize(size_t(t.numel()));
  dispatch<float, bf16, double>(t, "read_vector", [&]<class W>() {
    const W* p = t.data<W>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(p[i]);
  });
  return v;
}

// w[i] += add[i] (the gradient of a small weight vector, in the weights' own dtype).
inline void accumulate_vector(const Tensor& w, const std::vector<double>& add) {
  GEMMAX_CHECK(w.numel() == int64_t(add.size()), "accumulate_vector: ", w.str(), " += ", add.size(),
               " values");
  dispatch<float, bf16, double>(w, "accumulate_vector", [&]<class W>() {
    W* p = w.data<W>();
    for (size_t i = 0; i < add.size(); ++i) p[i] = W(double(p[i]) + add[i]);
  });
}

// A float64 device scalar (one element) of the step: scalar[0] += value.
inline void add_to_scalar(const Tensor& scalar, double value) {
  GEMMAX_CHECK(scalar.dtype() == DType::F64 && scalar.numel() == 1,
               "a device scalar must be float64 [1], got ", scalar.str());
  scalar.data<double>()[0] += value;
}

// The sum of f(i) over [0, n) in one fixed order whatever the thread count: blocks of 4096 terms
// summed in parallel, each in index order, then the block sums in block order.
template <class F>
double ordered_sum(int64_t n, F&& f) {
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
#pragma omp parallel for if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    double s = 0;
    const int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; ++i) s += f(i);
    partial[size_t(b)] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

// Ops whose operands all share one dtype.
inline void check_dtypes(const Tensor& a, const Tensor& b, const Tensor& c, const char* what) {
  GEMMAX_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), what, " dtypes differ: ", a.str(),
               " ", b.str(), " ", c.str());
}

inline void check_same(const Tensor& a, const Tensor& b, const char* what) {
  GEMMAX_CHECK(a.dtype() == b.dtype() && a.numel() == b.numel(), what, ": ", a.str(), " vs ",
               b.str());
}

}  // namespace gemmax::ref

// Helpers shared by the cpu backend's kernels: thresholds, checks, fixed-order reductions.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "gemmax/base/dtype_dispatch.h"
#include "gemmax/base/error.h"
#include "gemmax/base/tensor.h"

namespace gemmax::cpu {

constexpr int64_t kParallelMin = 1 << 15;  // elements below which a loop runs on one thread
constexpr int64_t kChunk = 1 << 14;        // elements per parallel chunk of a flat loop
constexpr int64_t kParallelRows = 64;      // rows below which a loop runs on one thread

// float64 tensors run on the reference loops; the fast kernels take bf16 and fp32.
inline bool is_wide(const Tensor& t) { return t.defined() && t.dtype() == DType::F64; }
inline bool is_fast(const Tensor& t) { return t.dtype() == DType::F32 || t.dtype() == DType::BF16; }

inline bool fast_dtypes(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!is_fast(*t)) return false;
  return true;
}

inline void check_same(const Tensor& a, const Tensor& b, const char* what) {
  GEMMAX_CHECK(a.dtype() == b.dtype() && a.numel() == b.numel(), what, ": ", a.str(), " vs ",
               b.str());
}

// A float64 device scalar: scalar[0] += value.
inline void add_to_scalar(const Tensor& scalar, double value) {
  GEMMAX_CHECK(scalar.dtype() == DType::F64 && scalar.numel() == 1,
               "a device scalar must be float64 [1], got ", scalar.str());
  scalar.data<double>()[0] += value;
}

// sum over fixed blocks [b, e) of [0, n) of block_sum(b, e), the blocks run in parallel and
// their sums added in block order: the same result whatever the thread count.
template <class F>
double ordered_sum(int64_t n, F&& block_sum, int64_t block = 16384) {
  const int64_t blocks = (n + block - 1) / block;
  std::vector<double> partial(size_t(std::max<int64_t>(blocks, 1)), 0.0);
#pragma omp parallel for if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b)
    partial[size_t(b)] = block_sum(b * block, std::min(n, (b + 1) * block));
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace gemmax::cpu

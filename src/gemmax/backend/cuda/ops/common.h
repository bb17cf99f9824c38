// The op layer of the cuda backend: each Backend op checks its operands, picks a launch shape
// and launches kernels (kernels/) through a platform P:
//
//   P::launch<K>(Launch, args...)   run kernel functor K over a grid
//   P::copy_bytes(dst, src, n)      device-to-device copy, in stream order
//   P::scratch()                    the backend's scratch arena (Scratch below)
//   P::errors()                     the DeviceError record kernels report into
//   P::matmul(c, a, ta, b, tb, acc) a dense matmul (Backend::matmul)
//   P::fast_kernels()               whether the tensor-core kernels may be used
//   P::slow_paths()                 where a slow fallback is announced (SlowPathNotes)
//   P::sm90_gmm()                   whether the grouped matmuls run the sm90 kernels
//   P::attention_path()             which kernels run bfloat16 attention (cuda_attention)
//   P::encode_tensor_map(map)       fills a TensorMap2d's (3d's) driver bytes (no-op on the host)
//
// CudaPlatform (cuda_backend.h) runs them on the GPU; EmuPlatform (emulated_backend.h) runs the
// same kernels on the host, which is how the CPU test suite checks them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "gemmax/backend/backend.h"
#include "gemmax/backend/cuda/kernels/elementwise.h"
#include "gemmax/base/dtype_dispatch.h"
#include "gemmax/base/error.h"
#include "gemmax/base/tensor.h"

namespace gemmax::cuda {

struct Launch {
  uint32_t gx = 1, gy = 1, gz = 1;
  int threads = 256;
  size_t smem = 0;
};

// The slow paths a platform has taken where a fast one exists (the plain kernels of bfloat16
// runs): each is said on stderr in one line, once per op and shape class, so that a run that is
// 20-50x slower than it should be says why.
class SlowPathNotes {
 public:
  // `op` and `shape_class` identify the case; `why` names the cause and the fix.
  void note(const std::string& op, const std::string& shape_class, const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!said_.insert(op + "|" + shape_class + "|" + why).second) return;
    std::fprintf(stderr, "gemmax: cuda backend: %s%s%s runs the plain kernels (20-50x slower): %s\n",
                 op.c_str(), shape_class.empty() ? "" : " ", shape_class.c_str(), why.c_str());
    std::fflush(stderr);
  }
  // A fast path that did not take a call, which other kernels (`runs`) then run.
  void note_instead(const std::string& op, const std::string& shape_class, const std::string& runs,
                    const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!said_.insert(op + "|" + shape_class + "|" + runs + "|" + why).second) return;
    std::fprintf(stderr, "gemmax: cuda backend: %s%s%s runs %s: %s\n", op.c_str(),
                 shape_class.empty() ? "" : " ", shape_class.c_str(), runs.c_str(), why.c_str());
    std::fflush(stderr);
  }
  size_t count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return said_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::set<std::string> said_;
};

// A grid-stride launch over n items with `threads` per block, at most `max_blocks` blocks.
inline Launch stride_launch(int64_t n, int threads = 256, int64_t max_blocks = 4096) {
  Launch l;
  l.threads = threads;
  const int64_t blocks = (n + threads - 1) / threads;
  l.gx = uint32_t(blocks < 1 ? 1 : blocks > max_blocks ? max_blocks : blocks);
  return l;
}

// One op's share of the scratch arena: aligned bump allocation. Sizes are checked, so an op
// never writes past the arena; ops whose temporaries grow with the problem split it into
// pieces that fit instead.
class Scratch {
 public:
  Scratch(void* base, size_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  template <class T>
  T* take(int64_t count, const char* what) {
    const size_t at = (used_ + 255) / 256 * 256, need = size_t(count) * sizeof(T);
    GEMMAX_CHECK(at + need <= bytes_, "cuda backend: ", what, " needs ", need,
                 " bytes of scratch, ", bytes_ - at, " left of ", bytes_);
    used_ = at + need;
    return reinterpret_cast<T*>(base_ + at);
  }
  size_t left() const { return bytes_ - (used_ + 255) / 256 * 256; }

 private:
  char* base_;
  size_t bytes_, used_ = 0;
};

// The element pointer of a tensor, its dtype checked (null for an undefined tensor).
template <class E>
E* ptr(const Tensor& t) {
  if (!t.defined()) return nullptr;
  GEMMAX_CHECK(t.dtype() == dtype_of<E>(), "cuda backend: ", t.str(), " used as ",
               dtype_name(dtype_of<E>()));
  return static_cast<E*>(t.raw());
}

// Whether rows of length `row` of these tensors go kern::kVec<E> elements (16 bytes) per access:
// every row length a multiple of it and every address 16-byte aligned.
template <class E>
bool vec_ok(int64_t row, std::initializer_list<const Tensor*> tensors) {
  if (row % kern::kVec<E> != 0) return false;
  for (const Tensor* t : tensors)
    if (t->defined() && reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0) return false;
  return true;
}

inline void check_stat(const Tensor& t, const char* op) {
  GEMMAX_CHECK(!t.defined() || t.dtype() == DType::F32, "cuda backend: ", op, ": ", t.str(),
               " must be float32 (statistics of float32 and bfloat16 runs)");
}
inline void check_scalar(const Tensor& t, const char* op) {
  GEMMAX_CHECK(t.dtype() == DType::F64 && t.numel() == 1, "cuda backend: ", op,
               ": a device scalar must be float64 [1], got ", t.str());
}
inline void check_same(const Tensor& a, const Tensor& b, const char* op) {
  GEMMAX_CHECK(a.dtype() == b.dtype() && a.numel() == b.numel(), op, ": ", a.str(), " vs ",
               b.str());
}

// Sums n terms into a device scalar through the fixed-size partials (kernels/elementwise.h).
template <class P, class K, class W, class... A>
void ordered_sum_into(P& p, Scratch& s, W* out, A... args) {
  double* partial = s.template take<double>(kern::kSumBlocks, "an ordered sum");
  Launch l;
  l.gx = kern::kSumBlocks;
  l.threads = kern::kSumThreads;
  l.smem = kern::kSumThreads / 32 * sizeof(double);
  p.template launch<K>(l, args..., partial);
  Launch one;
  one.threads = kern::kSumThreads;
  one.smem = l.smem;
  p.template launch<kern::AddPartialsKernel>(one, out, const_cast<const double*>(partial),
                                             int(kern::kSumBlocks));
}

}  // namespace gemmax::cuda

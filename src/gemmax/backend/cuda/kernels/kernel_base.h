// What every kernel of the cuda backend is written with.
//
// A kernel is a functor whose call operator runs one thread of a block:
//
//   struct ScaleKernel {
//     template <class X, class E> GEMMAX_KFN void operator()(X& x, E* p, int64_t n, float a) const;
//   };
//
// X is the execution context: DeviceExec (exec_device.cuh) maps it onto CUDA's built-ins and PTX
// on the GPU; EmuExec (emu/emu_exec.h) runs the same code on the host, every thread of a block a
// fiber, so that the CPU test suite runs the kernels themselves (indexing, masking, reductions,
// fragment layouts) against the reference backend. Blocks are one-dimensional; grids have up to
// three dimensions. Kernels talk to X for everything that differs between the two: thread and
// block indices, barriers, warp collectives, shared memory, tensor-core and asynchronous-copy
// instructions. Everything else is plain C++ shared by both.
#pragma once

#include <cstdint>
#include <cstring>

#include "gemmax/base/dtype.h"

#ifdef __CUDACC__
#define GEMMAX_HD __host__ __device__ __forceinline__
#define GEMMAX_KFN __device__ __forceinline__
#else
#include <cmath>
#define GEMMAX_HD inline
#define GEMMAX_KFN inline
#endif

// Fully unrolls the loop that follows on the GPU, so that register arrays indexed by its
// counter stay in registers (host compilers decide for themselves).
#ifdef __CUDACC__
#define GEMMAX_UNROLL _Pragma("unroll")
#else
#define GEMMAX_UNROLL
#endif

namespace gemmax::kern {

constexpr int kWarp = 32;

// Element access: every float type reads as its accumulation type (acc_t) and is written back
// with one rounding.
template <class E>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};
template <class E>
using acc_t = typename AccOf<E>::type;

GEMMAX_HD float to_acc(float v) { return v; }
GEMMAX_HD double to_acc(double v) { return v; }
GEMMAX_HD float to_acc(bf16 v) { return float(v); }

template <class E>
GEMMAX_HD E from_acc(float v);
template <>
GEMMAX_HD float from_acc<float>(float v) {
  return v;
}
template <>
GEMMAX_HD double from_acc<double>(float v) {
  return double(v);
}
template <>
GEMMAX_HD bf16 from_acc<bf16>(float v) {
  return bf16(v);
}
// One rounding from fp64, also to bf16 (bf16(double)).
template <class E>
GEMMAX_HD E from_double(double v) {
  return E(v);
}
// Rounds v to E's precision and back: what a value is once stored in a tensor of E.
template <class E>
GEMMAX_HD float round_to(float v) {
  return float(to_acc(from_acc<E>(v)));
}

// Two bf16 in one 32-bit register, the low half first (tensor-core operand order).
GEMMAX_HD uint32_t pack_bf16(float lo, float hi) {
  return uint32_t(bf16::round_bits(lo)) | (uint32_t(bf16::round_bits(hi)) << 16);
}
GEMMAX_HD float unpack_lo(uint32_t p) { return bf16::as_float(p << 16); }
GEMMAX_HD float unpack_hi(uint32_t p) { return bf16::as_float(p & 0xffff0000u); }

// ---- math: accurate versions on both sides (the fast approximations are chosen explicitly) ----
#ifdef __CUDA_ARCH__
GEMMAX_HD float kexp(float v) { return expf(v); }
GEMMAX_HD float kexp2(float v) { return exp2f(v); }
GEMMAX_HD float klog(float v) { return logf(v); }
GEMMAX_HD float klog2(float v) { return log2f(v); }
GEMMAX_HD float ktanh(float v) { return tanhf(v); }
GEMMAX_HD float ksqrt(float v) { return sqrtf(v); }
GEMMAX_HD double ksqrt(double v) { return sqrt(v); }
GEMMAX_HD bool kfinite(double v) { return isfinite(v); }
GEMMAX_HD void ksincos(double a, double* s, double* c) { sincos(a, s, c); }
#else
GEMMAX_HD float kexp(float v) { return std::exp(v); }
GEMMAX_HD float kexp2(float v) { return std::exp2(v); }
GEMMAX_HD float klog(float v) { return std::log(v); }
GEMMAX_HD float klog2(float v) { return std::log2(v); }
GEMMAX_HD float ktanh(float v) { return std::tanh(v); }
GEMMAX_HD float ksqrt(float v) { return std::sqrt(v); }
GEMMAX_HD double ksqrt(double v) { return std::sqrt(v); }
GEMMAX_HD bool kfinite(double v) { return std::isfinite(v); }
GEMMAX_HD void ksincos(double a, double* s, double* c) {
  *s = std::sin(a);
  *c = std::cos(a);
}
#endif
GEMMAX_HD int kpopc(uint32_t v) {
#ifdef __CUDA_ARCH__
  return __popc(v);
#else
  return __builtin_popcount(v);
#endif
}
template <class A>
GEMMAX_HD A kmax(A a, A b) {
  return a > b ? a : b;
}
template <class A>
GEMMAX_HD A kmin(A a, A b) {
  return a < b ? a : b;
}
constexpr float kNegInf = -__builtin_huge_valf();

GEMMAX_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- reductions in a fixed order (bit-identical from run to run) -----------------------------

// Butterfly sum over the 32 lanes of a warp: every lane ends with the same value.
template <class X, class A>
GEMMAX_KFN A warp_sum(X& x, A v) {
  for (int m = 16; m > 0; m >>= 1) v += x.shfl_xor(v, m);
  return v;
}
template <class X, class A>
GEMMAX_KFN A warp_max(X& x, A v) {
  for (int m = 16; m > 0; m >>= 1) v = kmax(v, x.shfl_xor(v, m));
  return v;
}

// Sum over the threads [0, n) of the block in groups of `width` consecutive threads (a multiple of
// 32 dividing the block, or 32): every thread gets its group's sum. `red` is shared memory of one
// A per warp. Ends with a barrier, so `red` may be reused at once.
template <class X, class A>
GEMMAX_KFN A group_sum(X& x, A v, int width, A* red) {
  v = warp_sum(x, v);
  if (width == kWarp) return v;
  const int warp = x.tid() / kWarp, lane = x.tid() % kWarp;
  const int per_group = width / kWarp, first = warp / per_group * per_group;
  if (lane == 0) red[warp] = v;
  x.sync();
  A s = red[first];
  for (int w = 1; w < per_group; ++w) s += red[first + w];
  x.sync();
  return s;
}
template <class X, class A>
GEMMAX_KFN A group_max(X& x, A v, int width, A* red) {
  v = warp_max(x, v);
  if (width == kWarp) return v;
  const int warp = x.tid() / kWarp, lane = x.tid() % kWarp;
  const int per_group = width / kWarp, first = warp / per_group * per_group;
  if (lane == 0) red[warp] = v;
  x.sync();
  A s = red[first];
  for (int w = 1; w < per_group; ++w) s = kmax(s, red[first + w]);
  x.sync();
  return s;
}

// Errors a kernel finds in its data (an id out of range, group sizes that do not add up): the
// first one is kept in device memory and reported by the host at the step's one synchronisation
// (Backend::to_host), as a gemmax::Error naming the problem.
struct DeviceError {
  enum Code : int32_t {
    kNone = 0,
    kTokenOutOfRange,   // a = token, b = position, c = vocabulary size
    kTargetOutOfRange,  // a = target, b = row, c = vocabulary size
    kExpertOutOfRange,  // a = expert id, b = index, c = number of experts
    kGroupSizes,        // a = sum of group sizes, b = rows
    kRowMap,            // a = entry, b = index, c = limit
    kNoVisibleSlot,     // a = query position
  };
  int32_t code;
  int32_t op;  // which op found it (an OpId)
  int64_t a, b, c;
};
enum OpId : int32_t {
  kOpEmbedding = 1,
  kOpCrossEntropy,
  kOpRouteSort,
  kOpGmm,
  kOpGmmDlhs,
  kOpGmmDrhs,
  kOpDecode
};

}  // namespace gemmax::kern

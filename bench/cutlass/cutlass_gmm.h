// CUTLASS 3's sm90 grouped GEMM (the ptr-array kernel with device-side problem shapes: TMA and
// wgmma, warp-specialised cooperative schedule, persistent tile scheduler), bfloat16 in, float32
// accumulation, for the grouped matmul's three products on rows in sorted order, contiguous:
// the measured comparator of the own kernels (bench/cutlass/gmm_cutlass_bench.cc and
// tests/backend/cuda/cutlass/gmm_cutlass_test.cc). Group sizes stay on the device:
// GroupTableKernel and GroupedGemmArgsKernel (gmm_grouped_args.h, beside this file) write the
// library's per-group arrays.
// Only this library's .cu sees CUTLASS; built when its headers are there (cmake/cutlass.cmake).
#pragma once

#include <cstdint>
#include <memory>

#include "gmm_grouped_args.h"

namespace gemmax::cutlass_gmm {

// One grouped product; operands as in kern::GroupedGemmParams, all in device memory.
struct Problem {
  kern::GroupedProduct product = kern::GroupedProduct::kForward;
  const int32_t* group_sizes = nullptr;  // [G]
  int64_t G = 0, m = 0, k = 0, N = 0, w0 = 0, n = 0;
  const void* x = nullptr;  // forward: lhs [m, k]; dlhs and drhs: dout [m, n] (bfloat16)
  const void* y = nullptr;  // forward and dlhs: W [G, N, k]; drhs: lhs [m, k] (bfloat16)
  void* out =
      nullptr;  // forward: out [m, n], dlhs: dlhs [m, k] (bfloat16); drhs: dW [G, N, k] (float32)
  bool accumulate = false;  // forward and dlhs: out += (else =); drhs always adds (as gmm_drhs)
};

// The kernels of the three products on one stream, with their device arrays and workspace.
class GroupedGemm {
 public:
  explicit GroupedGemm(void* stream);  // a cudaStream_t
  ~GroupedGemm();
  GroupedGemm(const GroupedGemm&) = delete;
  GroupedGemm& operator=(const GroupedGemm&) = delete;
  // Enqueues the product; throws gemmax::Error for a shape the kernels do not take (naming it)
  // or a CUDA / CUTLASS failure.
  void run(const Problem& p);
  // Waits for the stream; throws if a product's group sizes did not add up to its m.
  void check();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace gemmax::cutlass_gmm

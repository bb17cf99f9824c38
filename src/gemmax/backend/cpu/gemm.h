// The cpu backend's matrix products: every matmul, grouped matmul and attention product of
// the step runs through these, in bf16 or fp32 with fp32 accumulation.
//
// Operands are given by rows, so a row may come from anywhere: a grouped matmul reads the
// tokens of each expert straight from the unsorted activations (a row map) and writes its
// outputs back to token order, with no permute copies. The products are tiled the way BLIS
// and oneDNN's brgemm tile them: B is packed per 32 columns into the layout the
// multiply-accumulate instruction reads (pairs of the reduction index for bf16 vdpbf16ps;
// fp32 for the FMAs of avx512_fp32, bf16 widened once while packing),
// A's rows are read in place or, when many panels reuse them, from a copy whose row stride
// keeps them from sharing cache sets, and a tile of up to 14 x 32 outputs lives in registers
// over the whole reduction.
//
// Every output element is computed by one thread, over the reduction in one fixed order, so
// results do not depend on the thread count or the schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "gemmax/backend/cpu/isa.h"
#include "gemmax/base/dtype.h"

namespace gemmax::cpu {

// A matrix given by its rows: row i starts at base + index(i) * ld, index(i) = map[i] (a row
// map) or i.
template <class T>
struct Rows {
  T* base = nullptr;
  int64_t ld = 0;
  const int32_t* map = nullptr;
  T* operator()(int64_t i) const { return base + (map ? int64_t(map[i]) : i) * ld; }
};

// The second operand B [k, n] of a product, stored as a row-major matrix W:
//   transposed: W is [n, k] and B = W^T (an [out, in] weight in the forward: "NT");
//   plain:      W is [k, n] and B = W   (that weight read in place in the backward: "NN").
template <class T>
struct BMatrix {
  const T* w = nullptr;
  int64_t ldw = 0;
  bool transposed = true;
};

// Per-thread and shared scratch of the products: packed panels of B, packed transposed blocks
// of A. Fixed in size, allocated once by the backend (counted as workspace); the blockings
// adapt to fit it.
struct GemmScratch {
  void* shared = nullptr;  // packed B panels of one column chunk (gemm), A^T blocks (gemm_tn)
  int64_t shared_bytes = 0;
  std::vector<void*> thread;  // per thread: packing of gemm_tn and of the serial forms
  int64_t thread_bytes = 0;
};

// C (+)= A . B, fp32 accumulation: A [m, k] by rows (contiguous along k), B [k, n], C [m, n]
// by rows (bf16 or fp32, rounded once; accumulate adds into C). T: bf16 or float.
// Runs on the OpenMP threads of the caller's team (call it outside parallel regions).
template <class T, class TC>
void gemm(Isa isa, int64_t m, int64_t n, int64_t k, Rows<const T> a, BMatrix<T> b, Rows<TC> c,
          bool accumulate, const GemmScratch& scratch);

// C [n, k] (+)= A^T . B over m rows: A [m, n] and B [m, k] by rows (weight gradients: a
// reduction over tokens). C is row-major with row stride ldc. The reduction runs in one pass
// when its packed panels fit the scratch, else in chunks added into C in order: a bf16 C takes
// one pass only (longer reductions go into fp32).
template <class T, class TC>
void gemm_tn(Isa isa, int64_t n, int64_t k, int64_t m, Rows<const T> a, Rows<const T> b, TC* c,
             int64_t ldc, bool accumulate, const GemmScratch& scratch);

// The same products on the calling thread alone, with that thread's scratch (each thread's
// share of a grouped matmul whose groups run in parallel).
template <class T, class TC>
void gemm_serial(Isa isa, int64_t m, int64_t n, int64_t k, Rows<const T> a, BMatrix<T> b,
                 Rows<TC> c, bool accumulate, void* scratch, int64_t scratch_bytes);
template <class T, class TC>
void gemm_tn_serial(Isa isa, int64_t n, int64_t k, int64_t m, Rows<const T> a, Rows<const T> b,
                    TC* c, int64_t ldc, bool accumulate, void* scratch, int64_t scratch_bytes);

// Bytes of a packed B panel per byte of bf16 B with the kernels of `isa`: 2 for avx512_fp32,
// which widens bf16 panels to fp32 when packing them, else 1.
int64_t packed_width(Isa isa);

// The scratch gemm and gemm_tn need for blockings that work on any size, with the kernels of
// `isa` (scaled by packed_width, so the blockings and the longest reduction are the same in
// every family).
int64_t gemm_shared_bytes(Isa isa);
int64_t gemm_thread_bytes(Isa isa);

}  // namespace gemmax::cpu

// The per-group arguments of a library's grouped GEMM (CUTLASS 3's sm90 ptr-array kernel takes
// its problem shapes, operand pointers and leading strides from device arrays), written on the
// device from the group table (GroupTableKernel), so that no group size is read on the host.
// A library's TMA loads are tiled: they cannot gather rows through a row map, so every operand
// here is in sorted-row order, contiguous (maps are applied by a separate permute).
//
// In the library's terms each group computes D (M x N) = A (M x K) . B^T (B is N x K), with one
// leading stride per operand, in elements (the other stride is 1):
//   forward  out[m, n] = lhs[m, k] . W[n, k]^T
//            M rows, N n, K k; A lhs (ld k), B W (ld k), D out (ld n)
//   dlhs     dlhs[m, k] = dout[m, n] . W[n, k]
//            M rows, N k, K n; A dout (ld n), B W read N-major (ld k), D dlhs (ld k)
//   drhs     dW[n, k] += dout[r, n]^T . lhs[r, k] over a group's rows r
//            M n, N k, K rows; A dout M-major (ld n), B lhs N-major (ld k), D dW (ld k)
// W and dW are [G, N, k]; a group's window is rows [w0, w0 + n) of its N. Which of an operand's
// two strides is the unit one is fixed by the library kernel's layout, not written here.
#pragma once

#include "gemmax/backend/cuda/kernels/gmm_tiles.h"

namespace gemmax::kern {

enum class GroupedProduct : int32_t { kForward, kDlhs, kDrhs };

struct GroupedGemmParams {
  GroupedProduct product;
  const int32_t* first_row;  // the group table's first_row [G + 1] (GroupTableKernel)
  int64_t G, m;              // groups; sorted rows
  const void* x;             // forward: lhs [m, k]; dlhs and drhs: dout [m, n]
  const void* y;             // forward and dlhs: W [G, N, k]; drhs: lhs [m, k]
  void* out;                 // forward: out [m, n]; dlhs: dlhs [m, k]; drhs: dW [G, N, k]
  int64_t k, N, w0, n;
  int32_t in_bytes, out_bytes;  // element sizes of x and y, and of out
};

// Device arrays of G entries each, in the library's own layouts: shape holds M, N, K per group
// (three int32), the strides one int64 each.
struct GroupedGemmArrays {
  int32_t* shape;
  const void** a;
  const void** b;
  void** d;
  int64_t *lda, *ldb, *ldd;
};

// One block per group, one thread of it busy. Rows are clamped to [0, m] so that group sizes that
// do not add up to m (GroupTableKernel records that) never send the library past a buffer. drhs
// adds into dW (as Backend::gmm_drhs), so an empty group adds nothing: it becomes an empty problem
// (M = 0, no tiles) rather than one with K = 0, which the library's sm90 kernels are not relied on
// to take.
struct GroupedGemmArgsKernel {
  static constexpr int kMaxThreads = 256;
  template <class X>
  GEMMAX_KFN void operator()(X& x, GroupedGemmParams p, GroupedGemmArrays arr) const {
    const int64_t g = x.bx();
    const int64_t row0 = kmin<int64_t>(kmax<int64_t>(p.first_row[g], 0), p.m);
    const int64_t rows = kmin<int64_t>(kmax<int64_t>(p.first_row[g + 1], row0), p.m) - row0;
    const int64_t window = (g * p.N + p.w0) * p.k;  // the window's first element of W or dW
    const char* xs = static_cast<const char*>(p.x);
    const char* ys = static_cast<const char*>(p.y);
    char* out = static_cast<char*>(p.out);
    int64_t M = rows, N = p.n, K = p.k, lda = p.k, ldb = p.k, ldd = p.n;
    const char *a = xs + row0 * p.k * p.in_bytes, *b = ys + window * p.in_bytes;
    char* d = out + row0 * p.n * p.out_bytes;
    if (p.product == GroupedProduct::kDlhs) {
      N = p.k;
      K = p.n;
      lda = p.n;
      a = xs + row0 * p.n * p.in_bytes;
      ldd = p.k;
      d = out + row0 * p.k * p.out_bytes;
    } else if (p.product == GroupedProduct::kDrhs) {
      M = rows > 0 ? p.n : 0;
      N = p.k;
      K = rows;
      lda = p.n;
      a = xs + row0 * p.n * p.in_bytes;
      b = ys + row0 * p.k * p.in_bytes;
      ldd = p.k;
      d = out + window * p.out_bytes;
    }
    if (x.tid() != 0) return;
    arr.shape[3 * g] = int32_t(M);
    arr.shape[3 * g + 1] = int32_t(N);
    arr.shape[3 * g + 2] = int32_t(K);
    arr.a[g] = a;
    arr.b[g] = b;
    arr.d[g] = d;
    arr.lda[g] = lda;
    arr.ldb[g] = ldb;
    arr.ldd[g] = ldd;
  }
};

}  // namespace gemmax::kern

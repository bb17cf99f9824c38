// Grouped matmuls over contiguous row groups (docs/TRAINING.md §4, §5): the experts' products.
// rhs [G, n, k] is in the Hugging Face [out, in] layout of each expert; m = sum of group_sizes
// (int32 [G]); `rows` places the sorted rows (GmmRows). Operands share one dtype, except gmm_drhs's
// drhs, which may be wider (fp32 weight gradients of bf16 activations).
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

// Where the sorted rows of a grouped matmul live (all optional). A grouped matmul works on rows
// sorted by expert; with these maps its operands stay in token order and the permute and un-permute
// around it fold into its row loads and stores (seed Part 2):
// - `in`: int32 [m]: sorted row r of the forward's input side (gmm's lhs, gmm_dlhs's output,
//   gmm_drhs's lhs) is row in[r] of that tensor;
// - `out`: int32 [m]: sorted row r of the forward's output side (gmm's out, gmm_dlhs's and
//   gmm_drhs's dout) is row out[r] of that tensor. An undefined map is the identity. `in` may
//   repeat rows (a gather from the [T, D] tokens); a map that writes (gmm's `out`, gmm_dlhs's `in`)
//   must be a permutation. `weight_begin`, `weight_rows` select rows [begin, begin + rows) of each
//   group's [n, k] weight (the gate or the up half of a fused gate_up weight; -1: all rows).
struct GmmRows {
  Tensor in, out;
  int64_t weight_begin = 0, weight_rows = -1;
  bool accumulate = false;  // gmm and gmm_dlhs: add into the output
};
inline const GmmRows kAllRows{};

// out[r] (+)= lhs[r] . rhs[g(r)]^T (lhs [m, k], out [m, n])
struct GmmArgs {
  const Tensor& out;
  const Tensor& lhs;
  const Tensor& rhs;
  const Tensor& group_sizes;
  const GmmRows& rows = kAllRows;
};
// dlhs[r] (+)= dout[r] . rhs[g(r)] (reads rhs in place; no transposed copy)
struct GmmDlhsArgs {
  const Tensor& dlhs;
  const Tensor& dout;
  const Tensor& rhs;
  const Tensor& group_sizes;
  const GmmRows& rows = kAllRows;
};
// drhs[g] += dout[rows of g]^T . lhs[rows of g]; a group with no rows adds nothing
struct GmmDrhsArgs {
  const Tensor& drhs;
  const Tensor& lhs;
  const Tensor& dout;
  const Tensor& group_sizes;
  const GmmRows& rows = kAllRows;
};

// The sizes of a grouped matmul, as validate works them out from the operands and GmmRows.
struct GmmDims {
  int64_t m = 0;          // sorted rows (the group sizes sum to it)
  int64_t k = 0;          // the weights' row length: lhs's (dlhs's) columns
  int64_t G = 0;          // groups
  int64_t N = 0;          // rows of each group's weight
  int64_t w0 = 0, n = 0;  // the weight window: rows [w0, w0 + n) of N; out's (dout's) columns
  // Rows of the input-side and the output-side tensor: the ranges of the `in` and `out` maps.
  int64_t in_rows = 0, out_rows = 0;
};

GmmDims validate(const GmmArgs& args);
GmmDims validate(const GmmDlhsArgs& args);
GmmDims validate(const GmmDrhsArgs& args);

// The host backends' check of the row maps' entries (data, which validate does not read): each
// `in` entry in [0, d.in_rows), each `out` entry in [0, d.out_rows). `in_side` and `out_side`
// name the two tensors in the message ("gmm lhs", "gmm out").
void check_row_maps_on_host(const GmmRows& rows, const GmmDims& d, const char* in_side,
                            const char* out_side);

#define GEMMAX_GMM_OPS(X)                 \
  X(gmm, GmmArgs, GroupedMatmul)          \
  X(gmm_dlhs, GmmDlhsArgs, GroupedMatmul) \
  X(gmm_drhs, GmmDrhsArgs, GroupedMatmul)

}  // namespace gemmax

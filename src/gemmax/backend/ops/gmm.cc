#include "gemmax/backend/ops/gmm.h"

#include "gemmax/backend/ops/check.h"

namespace gemmax {
namespace {

// Checks the row maps and the weight window of `rows` for m sorted rows and weights of N rows;
// returns the window's row count n.
int64_t window_rows(const GmmRows& rows, int64_t m, int64_t N, const char* op) {
  const int64_t w0 = rows.weight_begin, n = rows.weight_rows < 0 ? N - w0 : rows.weight_rows;
  GEMMAX_CHECK(w0 >= 0 && n >= 0 && w0 + n <= N, op, ": weight rows [", w0, ", ", w0 + n, ") of ",
               N);
  for (const Tensor* map : {&rows.in, &rows.out})
    GEMMAX_CHECK(!map->defined() || (map->dtype() == DType::I32 && map->numel() == m), op,
                 ": a row map must be int32 [", m, "], got ", map->str());
  return n;
}

void check_group_sizes(const Tensor& group_sizes, int64_t G, const char* op) {
  GEMMAX_CHECK(group_sizes.dtype() == DType::I32 && group_sizes.numel() == G, op,
               ": group_sizes must be int32 [", G, "], got ", group_sizes.str());
}

}  // namespace

void validate(const GmmArgs& args) {
  const auto& [out, lhs, rhs, group_sizes, rows] = args;
  GEMMAX_CHECK(out.ndim() == 2 && lhs.ndim() == 2 && rhs.ndim() == 3, "gmm shapes: lhs ", lhs.str(),
               " rhs ", rhs.str(), " out ", out.str());
  const int64_t k = lhs.dim(1), G = rhs.dim(0), N = rhs.dim(1), m = out.dim(0);
  GEMMAX_CHECK(rhs.dim(2) == k, "gmm shapes: lhs ", lhs.str(), " rhs ", rhs.str(), " out ",
               out.str());
  check_group_sizes(group_sizes, G, "gmm");
  const int64_t n = window_rows(rows, m, N, "gmm");
  GEMMAX_CHECK(out.dim(1) == n && (rows.in.defined() || lhs.dim(0) == m), "gmm shapes: lhs ",
               lhs.str(), " rhs ", rhs.str(), " out ", out.str());
  op_check::same_dtype(out, lhs, rhs, "gmm");
}

void validate(const GmmDlhsArgs& args) {
  const auto& [dlhs, dout, rhs, group_sizes, rows] = args;
  GEMMAX_CHECK(dlhs.ndim() == 2 && dout.ndim() == 2 && rhs.ndim() == 3, "gmm_dlhs shapes: dout ",
               dout.str(), " rhs ", rhs.str(), " dlhs ", dlhs.str());
  const int64_t k = rhs.dim(2), G = rhs.dim(0), N = rhs.dim(1), m = dlhs.dim(0);
  GEMMAX_CHECK(dlhs.dim(1) == k, "gmm_dlhs shapes: dout ", dout.str(), " rhs ", rhs.str(), " dlhs ",
               dlhs.str());
  check_group_sizes(group_sizes, G, "gmm_dlhs");
  const int64_t n = window_rows(rows, m, N, "gmm_dlhs");
  GEMMAX_CHECK(dout.dim(1) == n && (rows.out.defined() || dout.dim(0) == m),
               "gmm_dlhs shapes: dout ", dout.str(), " rhs ", rhs.str(), " dlhs ", dlhs.str());
  op_check::same_dtype(dlhs, dout, rhs, "gmm_dlhs");
}

void validate(const GmmDrhsArgs& args) {
  const auto& [drhs, lhs, dout, group_sizes, rows] = args;
  GEMMAX_CHECK(drhs.ndim() == 3 && lhs.ndim() == 2 && dout.ndim() == 2, "gmm_drhs shapes: lhs ",
               lhs.str(), " dout ", dout.str(), " drhs ", drhs.str());
  const int64_t k = lhs.dim(1), G = drhs.dim(0), N = drhs.dim(1);
  const int64_t m = rows.in.defined() ? rows.in.numel() : lhs.dim(0);
  GEMMAX_CHECK(drhs.dim(2) == k, "gmm_drhs shapes: lhs ", lhs.str(), " dout ", dout.str(), " drhs ",
               drhs.str());
  check_group_sizes(group_sizes, G, "gmm_drhs");
  const int64_t n = window_rows(rows, m, N, "gmm_drhs");
  GEMMAX_CHECK(dout.dim(1) == n && (rows.out.defined() || dout.dim(0) == m),
               "gmm_drhs shapes: lhs ", lhs.str(), " dout ", dout.str(), " drhs ", drhs.str());
  // drhs may be wider than the activations (fp32 weight gradients).
  GEMMAX_CHECK(lhs.dtype() == dout.dtype(), "gmm_drhs: ", lhs.str(), " and ", dout.str());
}

}  // namespace gemmax

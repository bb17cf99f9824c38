#include "gemmax/backend/ops/gmm.h"

#include <tuple>

#include "gemmax/backend/ops/check.h"

namespace gemmax {
namespace {

// Checks the row maps and the weight window of `rows` for d.m sorted rows and weights of d.N
// rows; sets the window (d.w0, d.n).
void check_window(const GmmRows& rows, GmmDims& d, const char* op) {
  d.w0 = rows.weight_begin;
  d.n = rows.weight_rows < 0 ? d.N - d.w0 : rows.weight_rows;
  GEMMAX_CHECK(d.w0 >= 0 && d.n >= 0 && d.w0 + d.n <= d.N, op, ": weight rows [", d.w0, ", ",
               d.w0 + d.n, ") of ", d.N);
  for (const Tensor* map : {&rows.in, &rows.out})
    GEMMAX_CHECK(!map->defined() || (map->dtype() == DType::I32 && map->numel() == d.m), op,
                 ": a row map must be int32 [", d.m, "], got ", map->str());
}

void check_group_sizes(const Tensor& group_sizes, int64_t G, const char* op) {
  GEMMAX_CHECK(group_sizes.dtype() == DType::I32 && group_sizes.numel() == G, op,
               ": group_sizes must be int32 [", G, "], got ", group_sizes.str());
}

}  // namespace

GmmDims validate(const GmmArgs& args) {
  const auto& [out, lhs, rhs, group_sizes, rows] = args;
  GEMMAX_CHECK(out.ndim() == 2 && lhs.ndim() == 2 && rhs.ndim() == 3, "gmm shapes: lhs ", lhs.str(),
               " rhs ", rhs.str(), " out ", out.str());
  GmmDims d{.m = out.dim(0), .k = lhs.dim(1), .G = rhs.dim(0), .N = rhs.dim(1)};
  d.in_rows = lhs.dim(0);
  d.out_rows = d.m;
  GEMMAX_CHECK(rhs.dim(2) == d.k, "gmm shapes: lhs ", lhs.str(), " rhs ", rhs.str(), " out ",
               out.str());
  check_group_sizes(group_sizes, d.G, "gmm");
  check_window(rows, d, "gmm");
  GEMMAX_CHECK(out.dim(1) == d.n && (rows.in.defined() || lhs.dim(0) == d.m), "gmm shapes: lhs ",
               lhs.str(), " rhs ", rhs.str(), " out ", out.str());
  op_check::same_dtype(out, lhs, rhs, "gmm");
  return d;
}

GmmDims validate(const GmmDlhsArgs& args) {
  const auto& [dlhs, dout, rhs, group_sizes, rows] = args;
  GEMMAX_CHECK(dlhs.ndim() == 2 && dout.ndim() == 2 && rhs.ndim() == 3, "gmm_dlhs shapes: dout ",
               dout.str(), " rhs ", rhs.str(), " dlhs ", dlhs.str());
  GmmDims d{.m = dlhs.dim(0), .k = rhs.dim(2), .G = rhs.dim(0), .N = rhs.dim(1)};
  d.in_rows = d.m;
  d.out_rows = dout.dim(0);
  GEMMAX_CHECK(dlhs.dim(1) == d.k, "gmm_dlhs shapes: dout ", dout.str(), " rhs ", rhs.str(),
               " dlhs ", dlhs.str());
  check_group_sizes(group_sizes, d.G, "gmm_dlhs");
  check_window(rows, d, "gmm_dlhs");
  GEMMAX_CHECK(dout.dim(1) == d.n && (rows.out.defined() || dout.dim(0) == d.m),
               "gmm_dlhs shapes: dout ", dout.str(), " rhs ", rhs.str(), " dlhs ", dlhs.str());
  op_check::same_dtype(dlhs, dout, rhs, "gmm_dlhs");
  return d;
}

// gmm_drhs has no output of m rows: with an `in` map, m is the map's length.
GmmDims validate(const GmmDrhsArgs& args) {
  const auto& [drhs, lhs, dout, group_sizes, rows] = args;
  GEMMAX_CHECK(drhs.ndim() == 3 && lhs.ndim() == 2 && dout.ndim() == 2, "gmm_drhs shapes: lhs ",
               lhs.str(), " dout ", dout.str(), " drhs ", drhs.str());
  GmmDims d{.m = rows.in.defined() ? rows.in.numel() : lhs.dim(0),
            .k = lhs.dim(1),
            .G = drhs.dim(0),
            .N = drhs.dim(1)};
  d.in_rows = lhs.dim(0);
  d.out_rows = dout.dim(0);
  GEMMAX_CHECK(drhs.dim(2) == d.k, "gmm_drhs shapes: lhs ", lhs.str(), " dout ", dout.str(),
               " drhs ", drhs.str());
  check_group_sizes(group_sizes, d.G, "gmm_drhs");
  check_window(rows, d, "gmm_drhs");
  GEMMAX_CHECK(dout.dim(1) == d.n && (rows.out.defined() || dout.dim(0) == d.m),
               "gmm_drhs shapes: lhs ", lhs.str(), " dout ", dout.str(), " drhs ", drhs.str());
  // drhs may be wider than the activations (fp32 weight gradients).
  GEMMAX_CHECK(lhs.dtype() == dout.dtype(), "gmm_drhs: ", lhs.str(), " and ", dout.str());
  return d;
}

void check_row_maps_on_host(const GmmRows& rows, const GmmDims& d, const char* in_side,
                            const char* out_side) {
  for (const auto& [map, limit, what] :
       {std::tuple{&rows.in, d.in_rows, in_side}, std::tuple{&rows.out, d.out_rows, out_side}}) {
    if (!map->defined()) continue;
    const int32_t* p = map->data<int32_t>();
    for (int64_t r = 0; r < d.m; ++r)
      GEMMAX_CHECK(p[r] >= 0 && p[r] < limit, what, " row map entry ", p[r], " at ", r,
                   " is outside [0, ", limit, ")");
  }
}

}  // namespace gemmax

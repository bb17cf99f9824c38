#include "gemmax/backend/ops/norm_rope.h"

#include "gemmax/backend/ops/check.h"

namespace gemmax {

void validate(const RmsnormForwardArgs& args) {
  const auto& [y, rstd, x, w, eps, out_scale, residual, round_before_scale] = args;
  const int64_t n = x.dim(-1), rows = n == 0 ? 0 : x.numel() / n;
  GEMMAX_CHECK(y.numel() == x.numel() && rstd.numel() == rows && (!w.defined() || w.numel() == n),
               "rmsnorm_forward shapes: x ", x.str(), " y ", y.str(), " rstd ", rstd.str(), " w ",
               op_check::str_or(w, "none"));
  GEMMAX_CHECK(y.dtype() == x.dtype(), "rmsnorm_forward: y ", y.str(), " for x ", x.str());
  GEMMAX_CHECK(
      !residual.defined() || (residual.dtype() == y.dtype() && residual.numel() == y.numel()),
      "rmsnorm_forward: residual ", residual.str(), " for y ", y.str());
}

void validate(const RmsnormBackwardArgs& args) {
  const auto& [dx, dw, dy, x, w, rstd, out_scale, accumulate_dx] = args;
  const int64_t n = x.dim(-1), rows = n == 0 ? 0 : x.numel() / n;
  GEMMAX_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel() && rstd.numel() == rows,
               "rmsnorm_backward shapes: x ", x.str(), " dx ", dx.str(), " dy ", dy.str());
  GEMMAX_CHECK(dx.dtype() == x.dtype() && dy.dtype() == x.dtype(), "rmsnorm_backward: x ", x.str(),
               " dx ", dx.str(), " dy ", dy.str());
  GEMMAX_CHECK(!dw.defined() || dw.numel() == n, "rmsnorm_backward: dw ", dw.str(), " for rows of ",
               n);
}

void validate(const RopeTableArgs& args) {
  const auto& [table, positions, inv_freq] = args;
  const int64_t T = positions.numel(), half = inv_freq.numel();
  GEMMAX_CHECK(table.numel() == T * half * 2, "rope_table: table ", table.str(), " for ", T,
               " positions and ", half, " frequencies");
}

void validate(const RopeArgs& args) {
  const auto& [x, table, inverse] = args;
  GEMMAX_CHECK(x.ndim() == 3 && table.numel() == x.dim(0) * x.dim(2), "rope shapes: x ", x.str(),
               " table ", table.str());
}

}  // namespace gemmax

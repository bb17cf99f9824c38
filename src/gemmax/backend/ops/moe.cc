#include "gemmax/backend/ops/moe.h"

#include "gemmax/backend/ops/check.h"

namespace gemmax {

// Expert ids, sort orders and group sizes are data: each backend checks them where it reads them.
TopKDims validate(const RouterForwardArgs& args) {
  const auto& [probs, idx, weights, logits, per_expert_scale, renormalize] = args;
  GEMMAX_CHECK(logits.ndim() == 2 && idx.ndim() == 2, "router_forward shapes: logits ",
               logits.str(), " idx ", idx.str());
  const int64_t T = logits.dim(0), E = logits.dim(1), K = idx.dim(1);
  GEMMAX_CHECK(probs.numel() == T * E && idx.dim(0) == T && weights.numel() == T * K &&
                   per_expert_scale.numel() == E,
               "router_forward shapes: logits ", logits.str(), " probs ", probs.str(), " idx ",
               idx.str(), " weights ", weights.str());
  return {T, E, K};
}

TopKDims validate(const RouterBackwardArgs& args) {
  const auto& [dlogits, dscale, dweights, probs, idx, scale, renormalize, lb_dprobs, seq] = args;
  GEMMAX_CHECK(probs.ndim() == 2 && idx.ndim() == 2, "router_backward shapes: probs ", probs.str(),
               " idx ", idx.str());
  const int64_t T = probs.dim(0), E = probs.dim(1), K = idx.dim(1);
  GEMMAX_CHECK(
      dlogits.numel() == T * E && dweights.numel() == T * K && scale.numel() == E &&
          dscale.numel() == E &&
          (!lb_dprobs.defined() || (seq > 0 && T % seq == 0 && lb_dprobs.numel() == T / seq * E)),
      "router_backward shapes: probs ", probs.str(), " dlogits ", dlogits.str(), " dweights ",
      dweights.str(), " per_expert_scale ", scale.str(), " lb_dprobs ",
      op_check::str_or(lb_dprobs, "(none)"), " seq ", seq);
  return {T, E, K};
}

TopKDims validate(const LoadBalanceForwardArgs& args) {
  const auto& [density, loss, probs, idx, seq, coefficient] = args;
  GEMMAX_CHECK(probs.ndim() == 2, "load_balance_forward: probs ", probs.str());
  const int64_t T = probs.dim(0), E = probs.dim(1);
  GEMMAX_CHECK(seq > 0 && T % seq == 0 && density.numel() == T / seq * E && idx.dim(0) == T,
               "load_balance_forward: density ", density.str(), " probs ", probs.str(), " seq ",
               seq);
  return {T, E, idx.dim(1)};
}

void validate(const RouteSortArgs& args) {
  const auto& [r, idx, num_experts] = args;
  const int64_t n = idx.numel();
  GEMMAX_CHECK(r.order.numel() == n && r.inverse.numel() == n && r.token.numel() == n &&
                   r.group_sizes.numel() == num_experts,
               "route_sort: order ", r.order.str(), " inverse ", r.inverse.str(), " group_sizes ",
               r.group_sizes.str(), " for ", idx.str(), " and ", num_experts, " experts");
}

void validate(const PermuteArgs& args) {
  const auto& [xs, x, order, k] = args;
  const int64_t rows = order.numel(), d = x.dim(-1);
  GEMMAX_CHECK(xs.numel() == rows * d && xs.dtype() == x.dtype(), "permute: xs ", xs.str(), " for ",
               rows, " rows of ", x.str());
}

TokenCopyDims validate(const PermuteBackwardArgs& args) {
  const auto& [dx, dxs, inverse, k, accumulate] = args;
  const int64_t d = dx.dim(-1), T = d == 0 ? 0 : dx.numel() / d;
  GEMMAX_CHECK((!inverse.defined() || inverse.numel() == T * k) && dxs.numel() == T * k * d,
               "permute_backward: dx ", dx.str(), " dxs ", dxs.str(), " inverse ",
               op_check::str_or(inverse, "(token order)"));
  return {T, k, d};
}

TokenCopyDims validate(const CombineForwardArgs& args) {
  const auto& [m, y, inverse, weights] = args;
  const int64_t d = m.dim(-1), T = d == 0 ? 0 : m.numel() / d, K = T == 0 ? 0 : weights.numel() / T;
  GEMMAX_CHECK((!inverse.defined() || inverse.numel() == T * K) && y.numel() == T * K * d,
               "combine_forward: m ", m.str(), " y ", y.str(), " weights ", weights.str());
  return {T, K, d};
}

TokenCopyDims validate(const CombineBackwardArgs& args) {
  const auto& [dy, dweights, dm, y, order, weights] = args;
  const int64_t d = dm.dim(-1), rows = weights.numel();
  const int64_t T = d == 0 ? 0 : dm.numel() / d, K = T == 0 ? 0 : rows / T;
  GEMMAX_CHECK(dy.numel() == rows * d && dweights.numel() == rows &&
                   (!order.defined() || order.numel() == rows),
               "combine_backward: dy ", dy.str(), " dweights ", dweights.str(), " for ", rows,
               " rows");
  return {T, K, d};
}

}  // namespace gemmax

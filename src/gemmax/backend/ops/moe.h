// The MoE router, its load-balance loss, and the dispatch of token copies to experts and back
// (docs/TRAINING.md §2, §3, §6, §7).
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

// The sort of a MoE layer's token copies by expert (docs/TRAINING.md §3). Token copy t*K + k is the
// k-th expert choice of token t.
struct Routing {
  Tensor order;        // int32 [T*K]: sorted row r holds token copy order[r]
  Tensor inverse;      // int32 [T*K]: inverse[order[r]] == r
  Tensor token;        // int32 [T*K]: order[r] / K, the token of sorted row r
  Tensor group_sizes;  // int32 [E]: rows of each expert; expert g owns a contiguous row range
};

// probs = softmax(logits) [T, E]; idx [T, K] = top-k of logits (ties: lower id first); weights
// [T, K] = probs[idx] (/ their sum if renormalize) * per_expert_scale[idx].
struct RouterForwardArgs {
  const Tensor& probs;
  const Tensor& idx;
  const Tensor& weights;
  const Tensor& logits;
  const Tensor& per_expert_scale;
  bool renormalize = false;
};
// dlogits = softmax backward of dp, where dp comes from dweights through the renormalisation and
// the per-expert scale, plus lb_dprobs[b, e] for every token of sequence b (load-balance gradient;
// may be undefined). dper_expert_scale accumulates.
struct RouterBackwardArgs {
  const Tensor& dlogits;
  const Tensor& dper_expert_scale;
  const Tensor& dweights;
  const Tensor& probs;
  const Tensor& idx;
  const Tensor& per_expert_scale;
  bool renormalize = false;
  const Tensor& lb_dprobs = kNoTensor;
  int64_t seq = 0;
};
// density [B, E] = fraction of sequence b's tokens that chose expert e; loss[0] += coefficient *
// mean_{b,e}(density * mean_s probs) (docs/TRAINING.md §7; coefficient = weight * E^2). loss: a
// float64 device scalar, or undefined (density only).
struct LoadBalanceForwardArgs {
  const Tensor& density;
  const Tensor& loss = kNoTensor;
  const Tensor& probs;
  const Tensor& idx;
  int64_t seq = 0;
  double coefficient = 0;
};
// Stable sort of the token copies in idx [T, K] by expert, into the caller's int32 tensors
// routing.order, .inverse, .token [T*K] and .group_sizes [E].
struct RouteSortArgs {
  const Routing& routing;
  const Tensor& idx;
  int64_t num_experts = 0;
};
// xs[r] = x[order[r] / k]
struct PermuteArgs {
  const Tensor& xs;
  const Tensor& x;
  const Tensor& order;
  int64_t k = 0;
};
// dx[t] (+)= sum_j dxs[inverse[t*k + j]]; inverse undefined: dxs is in token order
// (dx[t] (+)= sum_j dxs[t*k + j]).
struct PermuteBackwardArgs {
  const Tensor& dx;
  const Tensor& dxs;
  const Tensor& inverse = kNoTensor;
  int64_t k = 0;
  bool accumulate = false;
};
// m[t] = sum_j weights[t, j] * y[inverse[t*K + j]], summed in fp32 (fp64 for fp64 runs); inverse
// undefined: y is in token order (y[t*K + j]).
struct CombineForwardArgs {
  const Tensor& m;
  const Tensor& y;
  const Tensor& inverse = kNoTensor;
  const Tensor& weights;
};
// dy[r] = weights[order[r]] * dm[order[r] / K]; dweights[order[r]] = dm[order[r] / K] . y[r];
// order undefined: y and dy are in token order (order[r] = r).
struct CombineBackwardArgs {
  const Tensor& dy;
  const Tensor& dweights;
  const Tensor& dm;
  const Tensor& y;
  const Tensor& order = kNoTensor;
  const Tensor& weights;
};

// The sizes of the router's ops: T tokens, E experts, K of them chosen per token.
struct TopKDims {
  int64_t T = 0, E = 0, K = 0;
};
// The sizes of the ops between token rows and their copies: T tokens of K copies each, rows of d
// elements (T = 0 when d = 0, K = 0 when T = 0).
struct TokenCopyDims {
  int64_t T = 0, K = 0, d = 0;
};

TopKDims validate(const RouterForwardArgs& args);
TopKDims validate(const RouterBackwardArgs& args);
TopKDims validate(const LoadBalanceForwardArgs& args);
void validate(const RouteSortArgs& args);
void validate(const PermuteArgs& args);
TokenCopyDims validate(const PermuteBackwardArgs& args);
TokenCopyDims validate(const CombineForwardArgs& args);
TokenCopyDims validate(const CombineBackwardArgs& args);

#define GEMMAX_MOE_OPS(X)                                         \
  X(router_forward, RouterForwardArgs, RoutingPermute)            \
  X(router_backward, RouterBackwardArgs, RoutingPermute)          \
  X(load_balance_forward, LoadBalanceForwardArgs, RoutingPermute) \
  X(route_sort, RouteSortArgs, RoutingPermute)                    \
  X(permute, PermuteArgs, RoutingPermute)                         \
  X(permute_backward, PermuteBackwardArgs, RoutingPermute)        \
  X(combine_forward, CombineForwardArgs, RoutingPermute)          \
  X(combine_backward, CombineBackwardArgs, RoutingPermute)

}  // namespace gemmax

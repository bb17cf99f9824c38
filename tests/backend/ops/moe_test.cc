// Conformance cases (op_conformance.h): the router and the load-balance loss, the sort of token
// copies by expert, permute and combine. The grouped matmuls are gmm_test.cc.
#include "gemmax/base/convert.h"
#include "op_conformance.h"
#include "test_util.h"

namespace gemmax::conformance {

// The forward on random logits (with a tie: the lower expert id goes first); then the load-balance
// loss and the backward on the true probabilities and choices, so that their sums see the same
// inputs on both sides.
CONFORMANCE_CASE(RouterLoadBalanceAndTheirBackward) {
  struct Size {
    int64_t B, S, E, K;
  };
  for (DType dt : h.dtypes())
    for (const Size& z : {Size{3, 10, 11, 3}, Size{2, 21, 40, 6}})
      for (bool renorm : {true, false}) {
        const int64_t T = z.B * z.S, E = z.E, K = z.K;
        const std::string what = "E=" + std::to_string(E) + (renorm ? " renormalized" : "");
        Tensor logits = h.rand({T, E}, dt, 2.0);
        set_from_double(logits, 5, get_as_double(logits, 4));
        const Tensor pes = h.rand({E}, DType::F32, 0.3);
        struct Forward {
          Tensor logits, per_expert_scale, probs, idx, weights;
        };
        auto [got, truth] = h.run(
            Forward{logits, pes, h.zeros({T, E}), h.zeros({T, K}, DType::I32), h.zeros({T, K})},
            [&](Backend& be, const Forward& t) {
              be.router_forward({.probs = t.probs,
                                 .idx = t.idx,
                                 .weights = t.weights,
                                 .logits = t.logits,
                                 .per_expert_scale = t.per_expert_scale,
                                 .renormalize = renorm});
            });
        h.expect_near("router probs " + what, got.probs, truth.probs, 1e-6);
        h.expect_exact("router idx " + what, got.idx, truth.idx);
        h.expect_near("router weights " + what, got.weights, truth.weights, 1e-6);

        // density_alone: the load-balance forward asked for the density only.
        struct Backward {
          Tensor probs, idx, density, loss, density_alone, dlogits, dper_expert_scale, dweights,
              per_expert_scale, lb_dprobs;
        };
        const Tensor probs = convert_dtype(truth.probs, DType::F32), idx = truth.idx;
        auto [g2, t2] = h.run(
            Backward{probs, idx, h.zeros({z.B, E}), h.zeros({1}, DType::F64), h.zeros({z.B, E}),
                     h.zeros({T, E}, dt), h.rand({E}), h.rand({T, K}), pes, h.rand({z.B, E})},
            [&](Backend& be, const Backward& t) {
              be.load_balance_forward({.density = t.density,
                                       .loss = t.loss,
                                       .probs = t.probs,
                                       .idx = t.idx,
                                       .seq = z.S,
                                       .coefficient = 3.0});
              be.load_balance_forward(
                  {.density = t.density_alone, .probs = t.probs, .idx = t.idx, .seq = z.S});
              be.router_backward({.dlogits = t.dlogits,
                                  .dper_expert_scale = t.dper_expert_scale,
                                  .dweights = t.dweights,
                                  .probs = t.probs,
                                  .idx = t.idx,
                                  .per_expert_scale = t.per_expert_scale,
                                  .renormalize = renorm,
                                  .lb_dprobs = t.lb_dprobs,
                                  .seq = z.S});
            });
        h.expect_exact("density " + what, g2.density, t2.density);
        h.expect_exact("density alone " + what, g2.density_alone, t2.density_alone);
        EXPECT_NEAR(get_as_double(g2.loss, 0), get_as_double(t2.loss, 0),
                    1e-7 * std::abs(get_as_double(t2.loss, 0)))
            << what;
        h.expect_near("router dlogits " + what, g2.dlogits, t2.dlogits, h.tol(dt));
        h.expect_near("router dper_expert_scale " + what, g2.dper_expert_scale,
                      t2.dper_expert_scale, 1e-6);
      }
}

Tensor choices(Harness& h, const RoutedSize& z, bool random) {
  std::vector<int32_t> idx;
  for (int64_t t = 0; t < z.T; ++t)
    for (int64_t j = 0; j < z.K; ++j) {
      const int32_t e =
          random ? int32_t(h.rng().uniform_int(uint64_t(z.E - 1))) : int32_t((t * 7 + j * 2) % 5);
      idx.push_back(e == 5 ? int32_t(z.E - 1) : e);
    }
  return h.ints(idx).view({z.T, z.K});
}

// A stable sort with an expert no token chose, small and over one sort chunk; permute, combine and
// their backward through the sort's maps and in token order; rows of one element and of 16 bytes
// per access.
CONFORMANCE_CASE(RouteSortPermuteAndCombine) {
  for (const RoutedSize& z : {RoutedSize{23, 3, 6, {37}}, RoutedSize{4500, 3, 7, {21, 24}}}) {
    const int64_t T = z.T, K = z.K, E = z.E, TK = T * K;
    auto [got, truth] = h.run(
        RouteSort{choices(h, z, T > 100), h.zeros({TK}, DType::I32), h.zeros({TK}, DType::I32),
                  h.zeros({TK}, DType::I32), h.zeros({E}, DType::I32)},
        [&](Backend& be, const RouteSort& t) {
          be.route_sort({.routing = {t.order, t.inverse, t.token, t.group_sizes},
                         .idx = t.idx,
                         .num_experts = E});
        });
    for (const auto& [name, field] :
         {std::pair{"order", &RouteSort::order}, std::pair{"inverse", &RouteSort::inverse},
          std::pair{"token", &RouteSort::token}, std::pair{"group_sizes", &RouteSort::group_sizes}})
      h.expect_exact("route_sort " + std::string(name) + " T=" + std::to_string(T), got.*field,
                     truth.*field);
    ASSERT_EQ(get_as_double(truth.group_sizes, 5), 0.0);
    const Tensor order = truth.order, inverse = truth.inverse;
    // ys: the rows in expert order, permute_backward's dxs and combine's y; the inverse and
    // combine_order are absent in token order.
    struct Ops {
      Tensor x, order, inverse, xs, dx, ys, weights, m, dy, dweights, combine_order, dm;
    };
    for (DType dt : h.dtypes())
      for (const int64_t D : z.widths)
        for (bool token_order : {false, true}) {
          if (token_order && T > 100) continue;  // the maps at scale; token order on the small
          const Tensor inv = token_order ? Tensor() : inverse, ord = token_order ? Tensor() : order;
          auto [g, w] = h.run(
              Ops{h.rand({T, D}, dt), order, inv, h.zeros({TK, D}, dt), h.rand({T, D}, dt),
                  h.rand({TK, D}, dt), h.rand({T, K}), h.zeros({T, D}, dt), h.zeros({TK, D}, dt),
                  h.zeros({T, K}), ord, h.rand({T, D}, dt)},
              [&](Backend& be, const Ops& t) {
                be.permute({.xs = t.xs, .x = t.x, .order = t.order, .k = K});
                be.permute_backward(
                    {.dx = t.dx, .dxs = t.ys, .inverse = t.inverse, .k = K, .accumulate = true});
                be.combine_forward(
                    {.m = t.m, .y = t.ys, .inverse = t.inverse, .weights = t.weights});
                be.combine_backward({.dy = t.dy,
                                     .dweights = t.dweights,
                                     .dm = t.dm,
                                     .y = t.ys,
                                     .order = t.combine_order,
                                     .weights = t.weights});
              });
          const std::string what = "T=" + std::to_string(T) + " D=" + std::to_string(D) +
                                   (token_order ? " token order" : "");
          h.expect_exact("permute " + what, g.xs, w.xs);
          h.expect_near("permute_backward " + what, g.dx, w.dx, h.tol(dt));
          h.expect_near("combine_forward " + what, g.m, w.m, h.tol(dt));
          h.expect_near("combine_backward dy " + what, g.dy, w.dy, h.tol(dt));
          h.expect_near("combine_backward dweights " + what, g.dweights, w.dweights, 1e-5);
        }
  }
}

}  // namespace gemmax::conformance

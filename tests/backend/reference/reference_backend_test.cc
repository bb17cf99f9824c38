// Every op of the reference backend but the grouped matmul (gmm_test.cc): forward against a
// direct formula, backward against central finite differences in fp64.
#include <gtest/gtest.h>

#include <cmath>

#include "gemmax/backend/reference/reference_backend.h"
#include "reference_ops.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_grad_matches_fd;
using testing::inner;
using testing::max_abs_diff;
using testing::random_tensor;
using testing::ReferenceOps;

TEST_F(ReferenceOps, MatmulAllTranspositionsMatchDirectSum) {
  const int64_t M = 5, N = 7, K = 6;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool acc : {false, true}) {
        Tensor a = rand(ta ? Shape{K, M} : Shape{M, K}), b = rand(tb ? Shape{N, K} : Shape{K, N});
        Tensor c = rand({M, N}), c0 = zeros({M, N});
        be.copy({.dst = c0, .src = c});
        be.matmul({.c = c, .a = a, .trans_a = ta, .b = b, .trans_b = tb, .accumulate = acc});
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = acc ? get_as_double(c0, i * N + j) : 0.0;
            for (int64_t k = 0; k < K; ++k)
              s += get_as_double(a, ta ? k * M + i : i * K + k) *
                   get_as_double(b, tb ? j * K + k : k * N + j);
            EXPECT_NEAR(get_as_double(c, i * N + j), s, 1e-12) << ta << tb << acc;
          }
      }
}

TEST_F(ReferenceOps, RmsNormWithAndWithoutScale) {
  const int64_t rows = 4, n = 9;
  for (bool with_w : {true, false}) {
    Tensor x = rand({rows, n}), w = with_w ? rand({n}) : Tensor(), r = rand({rows, n});
    Tensor y = zeros({rows, n}), rstd = zeros({rows});
    const double scale = with_w ? 0.7 : 1.0;
    auto loss = [&] {
      be.rmsnorm_forward({.y = y,
                          .rstd = rstd,
                          .x = x,
                          .w = w,
                          .eps = 1e-6,
                          .out_scale = scale,
                          .round_before_scale = false});
      return inner(y, r);
    };
    loss();
    for (int64_t i = 0; i < rows; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += std::pow(get_as_double(x, i * n + j), 2);
      const double rs = 1.0 / std::sqrt(ss / n + 1e-6);
      for (int64_t j = 0; j < n; ++j)
        EXPECT_NEAR(get_as_double(y, i * n + j),
                    get_as_double(x, i * n + j) * rs * (with_w ? get_as_double(w, j) : 1.0) * scale,
                    1e-12);
    }
    Tensor dx = rand({rows, n}), dx0 = zeros({rows, n}), dw = with_w ? zeros({n}) : Tensor();
    be.copy({.dst = dx0, .src = dx});
    be.rmsnorm_backward({.dx = dx,
                         .dw = dw,
                         .dy = r,
                         .x = x,
                         .w = w,
                         .rstd = rstd,
                         .out_scale = scale,
                         .accumulate_dx = true});  // accumulates onto dx0
    be.axpy({.y = dx, .alpha = -1.0, .x = dx0});
    expect_grad_matches_fd("rmsnorm dx", x, dx, loss, 36);
    if (with_w) expect_grad_matches_fd("rmsnorm dw", w, dw, loss, 9);
  }
}

TEST_F(ReferenceOps, RopeRotatesPairsAndItsInverseIsTheBackward) {
  const int64_t T = 5, heads = 2, hd = 8;
  Tensor x = rand({T, heads, hd}), r = rand({T, heads, hd});
  Tensor pos = ints({0, 3, 1, 7, 2});
  Tensor freq = Tensor::empty({hd / 2}, DType::F64);
  for (int64_t i = 0; i < hd / 2; ++i)
    freq.data<double>()[i] = i < 3 ? std::pow(100.0, -2.0 * i / hd) : 0.0;
  Tensor y = zeros({T, heads, hd}), table = zeros({T, hd / 2, 2});
  be.rope_table({.table = table, .positions = pos, .inv_freq = freq});
  be.copy({.dst = y, .src = x});
  be.rope({.x = y, .table = table, .inverse = false});
  // Pair (i, i + hd/2) of token 3 (position 7) rotates by 7 * freq[i]; pair 3 does not rotate.
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double ang = 7 * freq.data<double>()[i];
    const int64_t o = (3 * heads + 1) * hd;
    const double a = get_as_double(x, o + i), b = get_as_double(x, o + i + hd / 2);
    EXPECT_NEAR(get_as_double(y, o + i), a * std::cos(ang) - b * std::sin(ang), 1e-12);
    EXPECT_NEAR(get_as_double(y, o + i + hd / 2), b * std::cos(ang) + a * std::sin(ang), 1e-12);
  }
  auto loss = [&] {
    be.copy({.dst = y, .src = x});
    be.rope({.x = y, .table = table, .inverse = false});
    return inner(y, r);
  };
  Tensor dx = zeros({T, heads, hd});
  be.copy({.dst = dx, .src = r});
  be.rope({.x = dx, .table = table, .inverse = true});
  expect_grad_matches_fd("rope dx", x, dx, loss, 40);
}

TEST_F(ReferenceOps, AttentionMatchesDirectSoftmaxAndBackward) {
  // 2 sequences of 6, 4 query heads over 2 kv heads, window 3, sequence 1 packs two segments.
  AttentionShape s{2, 6, 4, 2, 5, 3};
  const int64_t T = s.batch * s.seq;
  Tensor q = rand({T, 4, 5}, 0.5), k = rand({T, 2, 5}, 0.5), v = rand({T, 2, 5}),
         r = rand({T, 4, 5});
  Tensor seg = ints({1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2});
  Tensor o = zeros({T, 4, 5}), lse = zeros({2, 4, 6});
  auto loss = [&] {
    be.attention_forward(
        {.o = o, .lse = lse, .q = q, .k = k, .v = v, .segment_ids = seg, .shape = s});
    return inner(o, r);
  };
  loss();
  // Direct check of one output row: sequence 1, query 4 (segment 2), head 3 (kv head 1).
  {
    const int64_t b = 1, i = 4, h = 3, kvh = 1;
    std::vector<double> w;
    double z = 0;
    for (int64_t j = 0; j <= i; ++j) {
      const bool ok = j > i - 3 && get_as_double(seg, b * 6 + j) == get_as_double(seg, b * 6 + i);
      double d = 0;
      for (int64_t c = 0; c < 5; ++c)
        d += get_as_double(q, ((b * 6 + i) * 4 + h) * 5 + c) *
             get_as_double(k, ((b * 6 + j) * 2 + kvh) * 5 + c);
      w.push_back(ok ? std::exp(d) : 0.0);
      z += w.back();
    }
    for (int64_t c = 0; c < 5; ++c) {
      double acc = 0;
      for (int64_t j = 0; j <= i; ++j)
        acc += w[j] / z * get_as_double(v, ((b * 6 + j) * 2 + kvh) * 5 + c);
      EXPECT_NEAR(get_as_double(o, ((b * 6 + i) * 4 + h) * 5 + c), acc, 1e-12);
    }
  }
  Tensor dq = zeros({T, 4, 5}), dk = zeros({T, 2, 5}), dv = zeros({T, 2, 5});
  be.attention_backward({.dq = dq,
                         .dk = dk,
                         .dv = dv,
                         .dout = r,
                         .q = q,
                         .k = k,
                         .v = v,
                         .o = o,
                         .lse = lse,
                         .segment_ids = seg,
                         .shape = s});
  expect_grad_matches_fd("attention dq", q, dq, loss, 60);
  expect_grad_matches_fd("attention dk", k, dk, loss, 60);
  expect_grad_matches_fd("attention dv", v, dv, loss, 60);
}

TEST_F(ReferenceOps, GegluForwardAndBackward) {
  const int64_t m = 3, F = 4;
  Tensor h = rand({m, 2 * F}, 2.0), r = rand({m, F}), a = zeros({m, F});
  auto loss = [&] {
    be.geglu_forward({.a = a, .h = h});
    return inner(a, r);
  };
  loss();
  const double x = get_as_double(h, 1), up = get_as_double(h, F + 1);
  const double gelu = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  EXPECT_NEAR(get_as_double(a, 1), gelu * up, 1e-12);
  Tensor dh = zeros({m, 2 * F});
  be.geglu_backward({.dh = dh, .da = r, .h = h});
  expect_grad_matches_fd("geglu dh", h, dh, loss, 24);
}

TEST_F(ReferenceOps, RouterTopKRenormaliseScaleAndBackward) {
  const int64_t T = 6, E = 5, K = 2, S = 3;
  for (bool renorm : {true, false}) {
    Tensor logits = rand({T, E}), pes = rand({E}, 0.3);
    for (int64_t e = 0; e < E; ++e) set_from_double(pes, e, 1.0 + get_as_double(pes, e));
    Tensor probs = zeros({T, E}), idx = zeros({T, K}, DType::I32), w = zeros({T, K});
    Tensor rw = rand({T, K}), lb = rand({T / S, E});  // upstream dweights and load-balance dprobs
    auto loss = [&] {
      be.router_forward({.probs = probs,
                         .idx = idx,
                         .weights = w,
                         .logits = logits,
                         .per_expert_scale = pes,
                         .renormalize = renorm});
      double l = inner(w, rw);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < E; ++e)
          l += get_as_double(lb, (t / S) * E + e) * get_as_double(probs, t * E + e);
      return l;
    };
    loss();
    for (int64_t t = 0; t < T; ++t) {
      // Top-k is the k largest logits in descending order; weights follow the formula.
      const int32_t* id = idx.data<int32_t>() + t * K;
      double chosen = 0;
      for (int64_t j = 0; j < K; ++j) chosen += get_as_double(probs, t * E + id[j]);
      for (int64_t e = 0; e < E; ++e) {
        const bool picked = e == id[0] || e == id[1];
        if (!picked)
          EXPECT_LE(get_as_double(logits, t * E + e), get_as_double(logits, t * E + id[K - 1]));
      }
      EXPECT_GE(get_as_double(logits, t * E + id[0]), get_as_double(logits, t * E + id[1]));
      for (int64_t j = 0; j < K; ++j)
        EXPECT_NEAR(get_as_double(w, t * K + j),
                    get_as_double(probs, t * E + id[j]) / (renorm ? chosen : 1.0) *
                        get_as_double(pes, id[j]),
                    1e-12);
    }
    Tensor dlogits = zeros({T, E}), dpes = zeros({E});
    be.router_backward({.dlogits = dlogits,
                        .dper_expert_scale = dpes,
                        .dweights = rw,
                        .probs = probs,
                        .idx = idx,
                        .per_expert_scale = pes,
                        .renormalize = renorm,
                        .lb_dprobs = lb,
                        .seq = S});
    expect_grad_matches_fd("router dlogits", logits, dlogits, loss, 30, 1e-6);
    expect_grad_matches_fd("router dper_expert_scale", pes, dpes, loss, 5);
  }
}

TEST_F(ReferenceOps, RouterTiesGoToTheLowerExpert) {
  Tensor logits = zeros({1, 4}), pes = zeros({4});
  be.fill({.x = pes, .value = 1.0});
  set_from_double(logits, 2, 1.0);  // expert 2 highest, then 0, 1, 3 tied
  Tensor probs = zeros({1, 4}), idx = zeros({1, 3}, DType::I32), w = zeros({1, 3});
  be.router_forward({.probs = probs,
                     .idx = idx,
                     .weights = w,
                     .logits = logits,
                     .per_expert_scale = pes,
                     .renormalize = true});
  EXPECT_EQ(idx.data<int32_t>()[0], 2);
  EXPECT_EQ(idx.data<int32_t>()[1], 0);
  EXPECT_EQ(idx.data<int32_t>()[2], 1);
}

TEST_F(ReferenceOps, LoadBalanceStatisticsPerSequence) {
  const int64_t S = 2, E = 3;
  Tensor probs = Tensor::empty({4, E}, DType::F64);
  const double p[] = {.5, .3, .2, .1, .1, .8, .3, .3, .4, .6, .2, .2};
  std::copy(p, p + 12, probs.data<double>());
  Tensor idx = ints({0, 2, 2, 0});  // top-1 per token; sequences {0,1} and {2,3}
  Tensor density = zeros({2, E}), loss = zeros({1});
  be.fill({.x = loss, .value = 0.25});  // the loss accumulates
  be.load_balance_forward({.density = density,
                           .loss = loss,
                           .probs = probs,
                           .idx = idx.view({4, 1}),
                           .seq = S,
                           .coefficient = 3.0});
  const double v = (get_as_double(loss, 0) - 0.25) / 3.0;
  // density b0 = (.5, 0, .5), pbar b0 = (.3, .2, .5); b1 = (.5, 0, .5), (.45, .25, .3)
  EXPECT_NEAR(v, (.5 * .3 + .5 * .5 + .5 * .45 + .5 * .3) / 6, 1e-15);
  EXPECT_EQ(get_as_double(density, 2), 0.5);
}

TEST_F(ReferenceOps, SortPermuteCombineAndTheirBackward) {
  const int64_t T = 5, K = 2, D = 3, E = 4;
  Tensor idx = ints({2, 0, 1, 2, 2, 3, 0, 2, 1, 0}).view({T, K});
  Routing routing{zeros({T * K}, DType::I32), zeros({T * K}, DType::I32),
                  zeros({T * K}, DType::I32), zeros({E}, DType::I32)};
  be.route_sort({.routing = routing, .idx = idx, .num_experts = E});
  const std::vector<int32_t> sizes = {3, 2, 4, 1};
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(routing.group_sizes.data<int32_t>()[e], sizes[e]);
  // Stable: expert 0 holds copies 1, 6, 9 in that order.
  EXPECT_EQ(routing.order.data<int32_t>()[0], 1);
  EXPECT_EQ(routing.order.data<int32_t>()[1], 6);
  EXPECT_EQ(routing.order.data<int32_t>()[2], 9);
  for (int64_t r = 0; r < T * K; ++r) {
    EXPECT_EQ(routing.inverse.data<int32_t>()[routing.order.data<int32_t>()[r]], r);
    EXPECT_EQ(routing.token.data<int32_t>()[r], routing.order.data<int32_t>()[r] / K);
  }

  Tensor x = rand({T, D}), rx = rand({T * K, D}), xs = zeros({T * K, D});
  auto permute_loss = [&] {
    be.permute({.xs = xs, .x = x, .order = routing.order, .k = K});
    return inner(xs, rx);
  };
  Tensor dx = zeros({T, D});
  be.permute_backward(
      {.dx = dx, .dxs = rx, .inverse = routing.inverse, .k = K, .accumulate = false});
  expect_grad_matches_fd("permute dx", x, dx, permute_loss, 15);

  Tensor y = rand({T * K, D}), w = rand({T, K}), rm = rand({T, D}), m = zeros({T, D});
  auto combine_loss = [&] {
    be.combine_forward({.m = m, .y = y, .inverse = routing.inverse, .weights = w});
    return inner(m, rm);
  };
  Tensor dy = zeros({T * K, D}), dw = zeros({T, K});
  be.combine_backward(
      {.dy = dy, .dweights = dw, .dm = rm, .y = y, .order = routing.order, .weights = w});
  expect_grad_matches_fd("combine dy", y, dy, combine_loss, 30);
  expect_grad_matches_fd("combine dweights", w, dw, combine_loss, 10);
}

TEST_F(ReferenceOps, SoftcapCrossEntropyAndGradient) {
  const int64_t C = 4, V = 7;
  Tensor z = rand({C, V}, 20.0), targets = ints({3, 0, 6, 2}), mask = ints({1, 0, 2, 1});
  Tensor work = zeros({C, V}), sum = zeros({1});
  auto loss = [&] {
    be.copy({.dst = work, .src = z});
    be.fill({.x = sum, .value = 0.0});
    be.softcap_cross_entropy({.logits = work,
                              .loss = sum,
                              .targets = targets,
                              .mask = mask,
                              .cap = 30.0,
                              .grad_scale = 0.0,
                              .write_grad = false});
    return get_as_double(sum, 0);
  };
  double expect = 0;
  for (int64_t r : {0, 2, 3}) {
    double zs = 0;
    for (int64_t v = 0; v < V; ++v)
      zs += std::exp(30 * std::tanh(get_as_double(z, r * V + v) / 30));
    expect +=
        std::log(zs) - 30 * std::tanh(get_as_double(z, r * V + targets.data<int32_t>()[r]) / 30);
  }
  EXPECT_NEAR(loss(), expect, 1e-10);
  Tensor dz = zeros({C, V});
  be.copy({.dst = dz, .src = z});
  be.softcap_cross_entropy({.logits = dz,
                            .loss = sum,
                            .targets = targets,
                            .mask = mask,
                            .cap = 30.0,
                            .grad_scale = 1.0,
                            .write_grad = true});
  expect_grad_matches_fd("softcap_cross_entropy dz", z, dz, loss, 28);
}

TEST_F(ReferenceOps, EmbeddingLookupAndScatterAdd) {
  const int64_t V = 6, D = 3;
  Tensor table = rand({V, D}), tokens = ints({4, 1, 4, 0}), r = rand({4, D}), x = zeros({4, D});
  auto loss = [&] {
    be.embedding_forward({.x = x, .tokens = tokens, .table = table, .scale = 2.5});
    return inner(x, r);
  };
  loss();
  EXPECT_DOUBLE_EQ(get_as_double(x, 2 * D + 1), 2.5 * get_as_double(table, 4 * D + 1));
  Tensor dtable = zeros({V, D});
  be.embedding_backward({.dtable = dtable, .dx = r, .tokens = tokens, .scale = 2.5});
  expect_grad_matches_fd("embedding dtable", table, dtable, loss, 18);
  Tensor bad = ints({6});
  EXPECT_THROW(
      be.embedding_forward({.x = x.rows(0, 1), .tokens = bad, .table = table, .scale = 1.0}),
      Error);
}

// The clipping factor comes from the step's gradient sum of squares on the device: norm 2 against a
// threshold of 1 halves the gradient. A non-finite scalar skips the update.
TEST_F(ReferenceOps, AdamWMatchesTheOptaxFormula) {
  Tensor p = rand({5}), g = rand({5}), m = zeros({5}), v = zeros({5});
  Tensor p0 = zeros({5}), scalars = zeros({StepScalars::kCount});
  be.copy({.dst = p0, .src = p});
  set_from_double(scalars, StepScalars::kGradSumSq, 4.0);
  AdamWStep s{0.01, 0.9, 0.95, 1e-8, 0.0, 0.1, 1.0, 1};
  for (double bad : {NAN, INFINITY}) {
    for (int64_t slot = 0; slot < StepScalars::kCount; ++slot) {
      Tensor keep = zeros({StepScalars::kCount});
      be.copy({.dst = keep, .src = scalars});
      set_from_double(keep, slot, bad);
      be.adamw_step({.param = p, .grad = g, .m = m, .v = v, .step = s, .scalars = keep});
      EXPECT_EQ(max_abs_diff(p, p0), 0.0) << "slot " << slot;
      EXPECT_EQ(get_as_double(m, 0), 0.0);
    }
  }
  be.adamw_step({.param = p, .grad = g, .m = m, .v = v, .step = s, .scalars = scalars});
  for (int64_t i = 0; i < 5; ++i) {
    const double gi = get_as_double(g, i) * 0.5;
    const double mh = 0.1 * gi / 0.1, vh = 0.05 * gi * gi / 0.05;
    const double expect =
        get_as_double(p0, i) - 0.01 * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * get_as_double(p0, i));
    EXPECT_NEAR(get_as_double(p, i), expect, 1e-12);
  }
}

// ---- row maps, weight windows and the fused forms: each equals its plain composition -------

TEST_F(ReferenceOps, TransposeGroups) {
  const Tensor in = rand({3, 4, 5});
  Tensor out = zeros({3, 5, 4});
  be.transpose_groups({.out = out, .in = in});
  for (int64_t g = 0; g < 3; ++g)
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 5; ++c)
        EXPECT_EQ(get_as_double(out, (g * 5 + c) * 4 + r), get_as_double(in, (g * 4 + r) * 5 + c));
}

TEST_F(ReferenceOps, ScaledSumAndItsBackward) {
  const Tensor a = rand({4, 6}), b = rand({4, 6}), r = rand({4, 6});
  Tensor s = zeros({1}), y = zeros({4, 6});
  set_from_double(s, 0, 0.7);
  auto loss = [&] {
    be.scaled_sum_forward({.y = y, .a = a, .b = b, .s = s});
    return inner(y, r);
  };
  loss();
  EXPECT_NEAR(get_as_double(y, 5), (get_as_double(a, 5) + get_as_double(b, 5)) * 0.7, 1e-15);
  Tensor dab = zeros({4, 6}), ds = zeros({1});
  set_from_double(ds, 0, 1.5);  // accumulates
  be.scaled_sum_backward({.dab = dab, .ds = ds, .dy = r, .a = a, .b = b, .s = s});
  set_from_double(ds, 0, get_as_double(ds, 0) - 1.5);
  expect_grad_matches_fd("scaled_sum ds", s, ds, loss, 1);
  expect_grad_matches_fd("scaled_sum da", a, dab, loss, 24);
  expect_grad_matches_fd("scaled_sum db", b, dab, loss, 24);
}

TEST_F(ReferenceOps, SumSquaresAccumulatesInAFixedOrder) {
  const Tensor x = rand({10000});
  Tensor s = zeros({1});
  set_from_double(s, 0, 2.0);
  be.sum_squares({.sum = s, .x = x});
  double direct = 0;
  for (int64_t i = 0; i < x.numel(); ++i) direct += std::pow(get_as_double(x, i), 2);
  EXPECT_NEAR(get_as_double(s, 0), 2.0 + direct, 1e-9);
}

// The fused residual adds to the rounded norm, as a separate add does: bit for bit, in bf16
// too. round_before_scale rounds x * rstd and the scale to the activation dtype first.
TEST_F(ReferenceOps, RmsNormResidualAndRoundBeforeScale) {
  Rng r2(3);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor x = random_tensor({3, 8}, r2, 2.0, dt), res = random_tensor({3, 8}, r2, 1.0, dt);
    const Tensor w = random_tensor({8}, r2, 1.0, DType::F32);
    Tensor y = zeros({3, 8}, dt), fused = zeros({3, 8}, dt), sum = zeros({3, 8}, dt);
    Tensor rstd = zeros({3}, DType::F32);
    be.rmsnorm_forward({.y = y,
                        .rstd = rstd,
                        .x = x,
                        .w = w,
                        .eps = 1e-6,
                        .out_scale = 0.5,
                        .round_before_scale = false});
    be.add({.out = sum, .a = res, .b = y});
    be.rmsnorm_forward({.y = fused,
                        .rstd = rstd,
                        .x = x,
                        .w = w,
                        .eps = 1e-6,
                        .out_scale = 0.5,
                        .residual = res,
                        .round_before_scale = false});
    EXPECT_EQ(max_abs_diff(sum, fused), 0.0) << dtype_name(dt);
    Tensor rounded = zeros({3, 8}, dt);
    be.rmsnorm_forward({.y = rounded,
                        .rstd = rstd,
                        .x = x,
                        .w = w,
                        .eps = 1e-6,
                        .out_scale = 0.5,
                        .round_before_scale = true});
    for (int64_t i = 0; i < 24; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < 8; ++j) ss += std::pow(get_as_double(x, (i / 8) * 8 + j), 2);
      const double rs = 1.0 / std::sqrt(ss / 8 + 1e-6);
      Tensor one = zeros({1}, dt), ws = zeros({1}, dt);
      set_from_double(one, 0, get_as_double(x, i) * rs);
      set_from_double(ws, 0, get_as_double(w, i % 8) * 0.5);
      Tensor prod = zeros({1}, dt);
      set_from_double(prod, 0, get_as_double(one, 0) * get_as_double(ws, 0));
      EXPECT_EQ(get_as_double(rounded, i), get_as_double(prod, 0)) << dtype_name(dt) << " " << i;
    }
  }
}

TEST_F(ReferenceOps, GegluOnSeparateHalvesEqualsFusedRows) {
  const int64_t m = 3, F = 4;
  const Tensor h = rand({m, 2 * F}, 2.0), da = rand({m, F});
  Tensor gate = zeros({m, F}), up = zeros({m, F});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < F; ++j) {
      set_from_double(gate, i * F + j, get_as_double(h, i * 2 * F + j));
      set_from_double(up, i * F + j, get_as_double(h, i * 2 * F + F + j));
    }
  Tensor a1 = zeros({m, F}), a2 = zeros({m, F});
  be.geglu_forward({.a = a1, .h = h});
  be.geglu_forward({.a = a2, .h = gate, .up = up});
  EXPECT_EQ(max_abs_diff(a1, a2), 0.0);
  Tensor dh = zeros({m, 2 * F}), dgate = zeros({m, F}), dup = zeros({m, F});
  be.geglu_backward({.dh = dh, .da = da, .h = h});
  be.geglu_backward({.dh = dgate, .dup = dup, .da = da, .h = gate, .up = up});
  Tensor only_up = zeros({m, F});
  be.geglu_backward(
      {.dup = only_up, .da = da, .h = gate, .up = up});  // the gate half is not needed
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < F; ++j) {
      EXPECT_EQ(get_as_double(dgate, i * F + j), get_as_double(dh, i * 2 * F + j));
      EXPECT_EQ(get_as_double(dup, i * F + j), get_as_double(dh, i * 2 * F + F + j));
      EXPECT_EQ(get_as_double(only_up, i * F + j), get_as_double(dup, i * F + j));
    }
}

// Combine and permute backward on token-ordered rows (no index) equal the indexed forms on
// rows placed in token order.
TEST_F(ReferenceOps, CombineAndPermuteBackwardInTokenOrder) {
  const int64_t T = 5, K = 2, D = 3, E = 4;
  Tensor idx = ints({2, 0, 1, 2, 2, 3, 0, 2, 1, 0}).view({T, K});
  Routing r{zeros({T * K}, DType::I32), zeros({T * K}, DType::I32), zeros({T * K}, DType::I32),
            zeros({E}, DType::I32)};
  be.route_sort({.routing = r, .idx = idx, .num_experts = E});
  const Tensor y = rand({T * K, D}), w = rand({T, K}), dm = rand({T, D});
  Tensor y_tok = zeros({T * K, D});  // row t*K + k = y[inverse[t*K + k]]
  for (int64_t c = 0; c < T * K; ++c)
    for (int64_t d = 0; d < D; ++d)
      set_from_double(y_tok, c * D + d, get_as_double(y, r.inverse.data<int32_t>()[c] * D + d));
  Tensor m1 = zeros({T, D}), m2 = zeros({T, D});
  be.combine_forward({.m = m1, .y = y, .inverse = r.inverse, .weights = w});
  be.combine_forward({.m = m2, .y = y_tok, .weights = w});
  EXPECT_EQ(max_abs_diff(m1, m2), 0.0);
  Tensor dy1 = zeros({T * K, D}), dw1 = zeros({T, K}), dy2 = zeros({T * K, D}), dw2 = zeros({T, K});
  be.combine_backward(
      {.dy = dy1, .dweights = dw1, .dm = dm, .y = y, .order = r.order, .weights = w});
  be.combine_backward({.dy = dy2, .dweights = dw2, .dm = dm, .y = y_tok, .weights = w});
  EXPECT_EQ(max_abs_diff(dw1, dw2), 0.0);
  for (int64_t c = 0; c < T * K; ++c)
    for (int64_t d = 0; d < D; ++d)
      EXPECT_EQ(get_as_double(dy2, c * D + d),
                get_as_double(dy1, r.inverse.data<int32_t>()[c] * D + d));
  Tensor dx1 = zeros({T, D}), dx2 = zeros({T, D});
  be.permute_backward({.dx = dx1, .dxs = y, .inverse = r.inverse, .k = K, .accumulate = false});
  be.permute_backward({.dx = dx2, .dxs = y_tok, .k = K, .accumulate = false});
  EXPECT_EQ(max_abs_diff(dx1, dx2), 0.0);
}

}  // namespace
}  // namespace gemmax

// Every op of the reference backend: forward against a direct formula, backward against
// central finite differences in fp64.
#include <gtest/gtest.h>

#include <cmath>

#include "gemmax/backend/reference/reference_backend.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_grad_matches_fd;
using testing::inner;
using testing::max_abs_diff;
using testing::random_tensor;

class ReferenceOps : public ::testing::Test {
 protected:
  ReferenceBackend be;
  Rng rng{42};
  Tensor rand(const Shape& s, double scale = 1.0) { return random_tensor(s, rng, scale); }
  Tensor zeros(const Shape& s, DType t = DType::F64) { return Tensor::zeros(s, t); }
  Tensor ints(const std::vector<int32_t>& v) {
    Tensor t = Tensor::empty({int64_t(v.size())}, DType::I32);
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  }
};

TEST_F(ReferenceOps, MatmulAllTranspositionsMatchDirectSum) {
  const int64_t M = 5, N = 7, K = 6;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool acc : {false, true}) {
        Tensor a = rand(ta ? Shape{K, M} : Shape{M, K}), b = rand(tb ? Shape{N, K} : Shape{K, N});
        Tensor c = rand({M, N}), c0 = zeros({M, N});
        be.copy(c0, c);
        be.matmul(c, a, ta, b, tb, acc);
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

TEST_F(ReferenceOps, GroupedMatmulForwardAndBackward) {
  // Groups of 3, 0 (an expert with no rows), 4 and 1 rows; rhs in [G, n, k] layout.
  const int64_t m = 8, k = 5, n = 6, G = 4;
  Tensor sizes = ints({3, 0, 4, 1});
  Tensor lhs = rand({m, k}), rhs = rand({G, n, k}), r = rand({m, n});
  Tensor out = zeros({m, n});
  be.gmm(out, lhs, rhs, sizes, {});
  const int32_t group_of_row[m] = {0, 0, 0, 2, 2, 2, 2, 3};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < k; ++c)
        s += get_as_double(lhs, i * k + c) * get_as_double(rhs, (group_of_row[i] * n + j) * k + c);
      EXPECT_NEAR(get_as_double(out, i * n + j), s, 1e-12);
    }
  auto loss = [&] {
    be.gmm(out, lhs, rhs, sizes, {});
    return inner(out, r);
  };
  Tensor dlhs = zeros({m, k}), drhs = zeros({G, n, k});
  be.gmm_dlhs(dlhs, r, rhs, sizes, {});
  be.gmm_drhs(drhs, lhs, r, sizes, {});
  expect_grad_matches_fd("gmm dlhs", lhs, dlhs, loss, 40);
  expect_grad_matches_fd("gmm drhs", rhs, drhs, loss, 120);
  for (int64_t i = n * k; i < 2 * n * k; ++i) EXPECT_EQ(get_as_double(drhs, i), 0.0);
}

TEST_F(ReferenceOps, RmsNormWithAndWithoutScale) {
  const int64_t rows = 4, n = 9;
  for (bool with_w : {true, false}) {
    Tensor x = rand({rows, n}), w = with_w ? rand({n}) : Tensor(), r = rand({rows, n});
    Tensor y = zeros({rows, n}), rstd = zeros({rows});
    const double scale = with_w ? 0.7 : 1.0;
    auto loss = [&] {
      be.rmsnorm_forward(y, rstd, x, w, 1e-6, scale, Tensor(), false);
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
    be.copy(dx0, dx);
    be.rmsnorm_backward(dx, dw, r, x, w, rstd, scale, true);  // accumulates onto dx0
    be.axpy(dx, -1.0, dx0);
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
  Tensor y = zeros({T, heads, hd});
  be.copy(y, x);
  be.rope(y, pos, freq, false);
  // Pair (i, i + hd/2) of token 3 (position 7) rotates by 7 * freq[i]; pair 3 does not rotate.
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double ang = 7 * freq.data<double>()[i];
    const int64_t o = (3 * heads + 1) * hd;
    const double a = get_as_double(x, o + i), b = get_as_double(x, o + i + hd / 2);
    EXPECT_NEAR(get_as_double(y, o + i), a * std::cos(ang) - b * std::sin(ang), 1e-12);
    EXPECT_NEAR(get_as_double(y, o + i + hd / 2), b * std::cos(ang) + a * std::sin(ang), 1e-12);
  }
  auto loss = [&] {
    be.copy(y, x);
    be.rope(y, pos, freq, false);
    return inner(y, r);
  };
  Tensor dx = zeros({T, heads, hd});
  be.copy(dx, r);
  be.rope(dx, pos, freq, true);
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
    be.attention_forward(o, lse, q, k, v, seg, s);
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
  be.attention_backward(dq, dk, dv, r, q, k, v, o, lse, seg, s);
  expect_grad_matches_fd("attention dq", q, dq, loss, 60);
  expect_grad_matches_fd("attention dk", k, dk, loss, 60);
  expect_grad_matches_fd("attention dv", v, dv, loss, 60);
}

TEST_F(ReferenceOps, GegluForwardAndBackward) {
  const int64_t m = 3, F = 4;
  Tensor h = rand({m, 2 * F}, 2.0), r = rand({m, F}), a = zeros({m, F});
  auto loss = [&] {
    be.geglu_forward(a, h, Tensor());
    return inner(a, r);
  };
  loss();
  const double x = get_as_double(h, 1), up = get_as_double(h, F + 1);
  const double gelu = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  EXPECT_NEAR(get_as_double(a, 1), gelu * up, 1e-12);
  Tensor dh = zeros({m, 2 * F});
  be.geglu_backward(dh, Tensor(), r, h, Tensor());
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
      be.router_forward(probs, idx, w, logits, pes, renorm);
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
    be.router_backward(dlogits, dpes, rw, probs, idx, pes, renorm, lb, S);
    expect_grad_matches_fd("router dlogits", logits, dlogits, loss, 30, 1e-6);
    expect_grad_matches_fd("router dper_expert_scale", pes, dpes, loss, 5);
  }
}

TEST_F(ReferenceOps, RouterTiesGoToTheLowerExpert) {
  Tensor logits = zeros({1, 4}), pes = zeros({4});
  be.fill(pes, 1.0);
  set_from_double(logits, 2, 1.0);  // expert 2 highest, then 0, 1, 3 tied
  Tensor probs = zeros({1, 4}), idx = zeros({1, 3}, DType::I32), w = zeros({1, 3});
  be.router_forward(probs, idx, w, logits, pes, true);
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
  be.fill(loss, 0.25);  // the loss accumulates
  be.load_balance_forward(density, loss, probs, idx.view({4, 1}), S, 3.0);
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
  be.route_sort(routing, idx, E);
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
    be.permute(xs, x, routing.order, K);
    return inner(xs, rx);
  };
  Tensor dx = zeros({T, D});
  be.permute_backward(dx, rx, routing.inverse, K, false);
  expect_grad_matches_fd("permute dx", x, dx, permute_loss, 15);

  Tensor y = rand({T * K, D}), w = rand({T, K}), rm = rand({T, D}), m = zeros({T, D});
  auto combine_loss = [&] {
    be.combine_forward(m, y, routing.inverse, w);
    return inner(m, rm);
  };
  Tensor dy = zeros({T * K, D}), dw = zeros({T, K});
  be.combine_backward(dy, dw, rm, y, routing.order, w);
  expect_grad_matches_fd("combine dy", y, dy, combine_loss, 30);
  expect_grad_matches_fd("combine dweights", w, dw, combine_loss, 10);
}

TEST_F(ReferenceOps, SoftcapCrossEntropyAndGradient) {
  const int64_t C = 4, V = 7;
  Tensor z = rand({C, V}, 20.0), targets = ints({3, 0, 6, 2}), mask = ints({1, 0, 2, 1});
  Tensor work = zeros({C, V}), sum = zeros({1});
  auto loss = [&] {
    be.copy(work, z);
    be.fill(sum, 0.0);
    be.softcap_cross_entropy(work, sum, targets, mask, 30.0, 0.0, false);
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
  be.copy(dz, z);
  be.softcap_cross_entropy(dz, sum, targets, mask, 30.0, 1.0, true);
  expect_grad_matches_fd("softcap_cross_entropy dz", z, dz, loss, 28);
}

TEST_F(ReferenceOps, EmbeddingLookupAndScatterAdd) {
  const int64_t V = 6, D = 3;
  Tensor table = rand({V, D}), tokens = ints({4, 1, 4, 0}), r = rand({4, D}), x = zeros({4, D});
  auto loss = [&] {
    be.embedding_forward(x, tokens, table, 2.5);
    return inner(x, r);
  };
  loss();
  EXPECT_DOUBLE_EQ(get_as_double(x, 2 * D + 1), 2.5 * get_as_double(table, 4 * D + 1));
  Tensor dtable = zeros({V, D});
  be.embedding_backward(dtable, r, tokens, 2.5);
  expect_grad_matches_fd("embedding dtable", table, dtable, loss, 18);
  Tensor bad = ints({6});
  EXPECT_THROW(be.embedding_forward(x.rows(0, 1), bad, table, 1.0), Error);
}

// The clipping factor comes from the step's gradient sum of squares on the device: norm 2 against a
// threshold of 1 halves the gradient. A non-finite scalar skips the update.
TEST_F(ReferenceOps, AdamWMatchesTheOptaxFormula) {
  Tensor p = rand({5}), g = rand({5}), m = zeros({5}), v = zeros({5});
  Tensor p0 = zeros({5}), scalars = zeros({StepScalars::kCount});
  be.copy(p0, p);
  set_from_double(scalars, StepScalars::kGradSumSq, 4.0);
  AdamWStep s{0.01, 0.9, 0.95, 1e-8, 0.0, 0.1, 1.0, 1};
  for (double bad : {NAN, INFINITY}) {
    for (int64_t slot = 0; slot < StepScalars::kCount; ++slot) {
      Tensor keep = zeros({StepScalars::kCount});
      be.copy(keep, scalars);
      set_from_double(keep, slot, bad);
      be.adamw_step(p, g, m, v, s, keep);
      EXPECT_EQ(max_abs_diff(p, p0), 0.0) << "slot " << slot;
      EXPECT_EQ(get_as_double(m, 0), 0.0);
    }
  }
  be.adamw_step(p, g, m, v, s, scalars);
  for (int64_t i = 0; i < 5; ++i) {
    const double gi = get_as_double(g, i) * 0.5;
    const double mh = 0.1 * gi / 0.1, vh = 0.05 * gi * gi / 0.05;
    const double expect =
        get_as_double(p0, i) - 0.01 * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * get_as_double(p0, i));
    EXPECT_NEAR(get_as_double(p, i), expect, 1e-12);
  }
}

}  // namespace
}  // namespace gemmax

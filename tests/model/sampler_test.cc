// The sampler (model/sampler.h): greedy and its equivalents, the empirical distribution against
// the filtered softmax, seeds, and the options' errors.
#include "gemmax/model/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "test_util.h"

namespace gemmax {
namespace {
using testing::argmax;
using testing::expect_error;

std::vector<double> random_logits(int64_t V, uint64_t seed, double scale = 2.0) {
  Rng rng(seed);
  std::vector<double> l(V);
  for (double& x : l) x = scale * rng.normal();
  return l;
}

TEST(Sampler, GreedyTopK1AndTinyTopPAllPickTheArgmax) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<double> l = random_logits(50, seed);
    l[7] = l[31] = *std::max_element(l.begin(), l.end()) + 1;  // a tie: the lower id wins
    const int32_t best = argmax(l);
    ASSERT_EQ(best, 7);
    Sampler greedy({.temperature = 0, .seed = seed});
    Sampler top1({.temperature = 1.5, .top_k = 1, .seed = seed});
    Sampler nucleus({.temperature = 1.5, .top_p = 1e-9, .seed = seed});
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(greedy.sample(l), best);
      EXPECT_EQ(top1.sample(l), best);
      EXPECT_EQ(nucleus.sample(l), best);
    }
  }
}

// What the sampler should draw from, computed directly: softmax(l / T), restricted to the top
// k, then to the smallest most-likely prefix reaching top_p, renormalised.
std::vector<double> expected_distribution(const std::vector<double>& l, double T, int64_t k,
                                          double top_p) {
  const int64_t V = int64_t(l.size());
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  const int64_t keep_k = k > 0 ? std::min(k, V) : V;
  std::vector<double> p(V, 0.0);
  double z = 0;
  for (int64_t j = 0; j < keep_k; ++j) z += std::exp(l[order[j]] / T);
  double cum = 0;
  for (int64_t j = 0; j < keep_k; ++j) {
    p[order[j]] = std::exp(l[order[j]] / T) / z;
    cum += p[order[j]];
    if (cum >= top_p) break;
  }
  const double kept = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x /= kept;
  return p;
}

TEST(Sampler, EmpiricalDistributionMatchesTheFilteredSoftmax) {
  const int64_t V = 12, N = 200000;
  const std::vector<double> l = random_logits(V, 99, 1.0);
  struct Case {
    double T;
    int64_t k;
    double p;
  };
  for (const Case c : {Case{1.0, V, 1.0}, Case{1.0, 0, 1.0}, Case{0.7, 0, 1.0}, Case{1.3, 5, 1.0},
                       Case{1.0, 0, 0.8}, Case{2.0, 6, 0.9}}) {
    const std::vector<double> expected = expected_distribution(l, c.T, c.k, c.p);
    Sampler s({.temperature = c.T, .top_k = c.k, .top_p = c.p, .seed = 1234});
    std::vector<int64_t> count(V, 0);
    for (int64_t i = 0; i < N; ++i) ++count[s.sample(l)];
    // Pearson's chi-square over the tokens that can be drawn; the others must never appear.
    double chi2 = 0;
    int64_t dof = -1;
    for (int64_t v = 0; v < V; ++v) {
      if (expected[v] == 0) {
        EXPECT_EQ(count[v], 0) << "token " << v << " is outside top_k / top_p";
        continue;
      }
      const double e = expected[v] * double(N);
      chi2 += (double(count[v]) - e) * (double(count[v]) - e) / e;
      ++dof;
    }
    // Mean dof, sd sqrt(2 dof): 5 sd is far in the tail for a correct sampler, while a wrong
    // temperature or filter moves chi2 into the thousands at this N.
    EXPECT_LT(chi2, double(dof) + 5 * std::sqrt(2.0 * double(dof)) + 1)
        << "T " << c.T << " k " << c.k << " p " << c.p;
  }
}

TEST(Sampler, SameSeedSameTokensAndFloat32LogitsWork) {
  const std::vector<double> l = random_logits(40, 3);
  Tensor t32 = Tensor::empty({40}, DType::F32);
  for (int64_t i = 0; i < 40; ++i) set_from_double(t32, i, l[i]);
  Sampler a({.seed = 5}), b({.seed = 5}), c({.seed = 6});
  std::vector<int32_t> xa, xb, xc;
  for (int i = 0; i < 50; ++i) {
    xa.push_back(a.sample(l));
    xb.push_back(b.sample(t32));
    xc.push_back(c.sample(l));
  }
  // float32 rounding of the logits could flip a draw in principle; not with these values.
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
}

TEST(Sampler, BadOptionsAreNamed) {
  expect_error([] { Sampler s({.temperature = -1}); }, {"temperature", ">= 0"});
  expect_error([] { Sampler s({.top_k = -2}); }, {"top_k"});
  expect_error([] { Sampler s({.top_p = 0}); }, {"top_p", "(0, 1]"});
  expect_error([] { Sampler s({.top_p = 1.5}); }, {"top_p"});
  expect_error([] { Sampler s({.max_new_tokens = 0}); }, {"max_new_tokens"});
  Sampler s({});
  const std::vector<double> nan_logits = {0.0, std::nan("")};
  expect_error([&] { s.sample(nan_logits); }, {"NaN"});
}

}  // namespace
}  // namespace gemmax

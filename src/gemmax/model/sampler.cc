#include "gemmax/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gemmax/base/error.h"

namespace gemmax {

void check_sample_options(const SampleOptions& o) {
  if (o.max_new_tokens < 1 || o.max_new_tokens > (int64_t(1) << 24))
    fail("max_new_tokens=", o.max_new_tokens, " is outside its valid range [1, ", int64_t(1) << 24,
         "]");
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    fail("temperature must be a number >= 0 (0: greedy), got ", o.temperature);
  if (o.top_k < 0) fail("top_k must be >= 0 (0: no limit), got ", o.top_k);
  if (!std::isfinite(o.temperature) || o.temperature > 1e6)
    fail("temperature=", o.temperature, " is outside its valid range [0, 1000000]");
  if (!(o.top_p > 0 && o.top_p <= 1)) fail("top_p must be in (0, 1] (1: no limit), got ", o.top_p);
}

Sampler::Sampler(const SampleOptions& options) : options_(options), rng_(options.seed) {
  check_sample_options(options_);
}

int32_t Sampler::sample(const Tensor& logits) {
  const int64_t V = logits.numel();
  logits_.resize(size_t(V));
  switch (logits.dtype()) {
    case DType::F32:
      std::copy_n(logits.data<float>(), V, logits_.begin());
      break;
    case DType::F64:
      std::copy_n(logits.data<double>(), V, logits_.begin());
      break;
    default:
      fail("sampling: logits ", logits.str(), " must be float32 or float64");
  }
  return sample(logits_);
}

int32_t Sampler::sample(std::span<const double> logits) {
  const int64_t V = int64_t(logits.size());
  GEMMAX_CHECK(V > 0, "sampling from empty logits");
  // More likely first; equal logits: the lower id first, so that greedy is well defined.
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int32_t best = 0;
  for (int32_t i = 0; i < V; ++i) {
    if (std::isnan(logits[i])) fail("sampling: the logit of token ", i, " is NaN");
    if (before(i, best)) best = i;
  }
  if (!std::isfinite(logits[best]))
    fail("sampling: the largest logit is ", logits[best], "; the logits are not usable");
  if (options_.temperature == 0 || options_.top_k == 1) return best;

  // Candidates: the top_k most likely (in order), or every token (in order if top_p needs it).
  const bool nucleus = options_.top_p < 1;
  int64_t n = options_.top_k > 0 ? std::min(options_.top_k, V) : V;
  ids_.resize(size_t(V));
  std::iota(ids_.begin(), ids_.end(), 0);
  if (n < V)
    std::partial_sort(ids_.begin(), ids_.begin() + n, ids_.end(), before);
  else if (nucleus)
    std::sort(ids_.begin(), ids_.end(), before);

  // Unnormalised softmax(logits / temperature) of the candidates, relative to the largest.
  probs_.resize(size_t(n));
  double total = 0;
  for (int64_t j = 0; j < n; ++j) {
    probs_[j] = std::exp((logits[ids_[j]] - logits[best]) / options_.temperature);
    total += probs_[j];
  }
  if (nucleus) {  // the fewest leading candidates whose share reaches top_p (at least one)
    double kept = 0;
    int64_t m = 0;
    while (m < n) {
      kept += probs_[m++];
      if (kept >= options_.top_p * total) break;
    }
    n = m;
    total = kept;
  }
  double u = rng_.uniform() * total;
  for (int64_t j = 0; j < n; ++j) {
    u -= probs_[j];
    if (u < 0) return ids_[j];
  }
  return ids_[n - 1];  // u landed on the rounding error of the sum
}

}  // namespace gemmax

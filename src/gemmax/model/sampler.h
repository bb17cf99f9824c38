// Choosing the next token from logits: temperature, top-k, top-p (nucleus), a seeded RNG.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gemmax/base/rng.h"
#include "gemmax/base/tensor.h"

namespace gemmax {

struct SampleOptions {
  int64_t max_new_tokens = 64;
  double temperature = 1.0;  // logits / temperature; 0: greedy (argmax, ties to the lower id)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  double top_p = 1.0;        // then keep the fewest most likely whose probability reaches p
  uint64_t seed = 0;
  // Generation ends after any of these ids (generation_config.json's eos_token_id list);
  // empty: the tokenizer's eos.
  std::vector<int32_t> stop_ids;
};

// Throws gemmax::Error naming the first bad field and its valid range.
void check_sample_options(const SampleOptions& options);

class Sampler {
 public:
  explicit Sampler(const SampleOptions& options);

  // The next token from logits [V] on the host (float32 or float64).
  int32_t sample(const Tensor& logits);
  int32_t sample(std::span<const double> logits);

 private:
  SampleOptions options_;
  Rng rng_;
  std::vector<double> logits_, probs_;
  std::vector<int32_t> ids_;
};

}  // namespace gemmax

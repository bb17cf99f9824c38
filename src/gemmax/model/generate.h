// Text in, text out: encode a prompt, prefill the decoder, sample until eos or max_new_tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemmax/data/tokenizer.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/lora/lora_params.h"
#include "gemmax/model/sampler.h"

namespace gemmax {

struct Generation {
  std::vector<int32_t> prompt_ids;  // bos (if the tokenizer has one), then the prompt's ids
  std::vector<int32_t> new_ids;     // sampled; ends with the stop id if stopped_at_eos
  std::string prompt_text;          // the prompt ids decoded
  std::string completion;           // the new ids decoded, as they continue the prompt
  bool stopped_at_eos = false;      // at an eos id (SampleOptions::stop_ids)
  double prefill_seconds = 0;  // the prompt's pass, up to its logits
  double decode_seconds = 0;   // every later pass, with sampling
  int64_t decode_steps = 0;    // passes of one generated token each

  double prefill_tokens_per_sec() const;
  double decode_tokens_per_sec() const;
};

// The prompt is framed as training documents are (bos, then its ids; no eos). Throws
// gemmax::Error for an empty prompt, a tokenizer whose vocabulary is larger than the model's,
// or bad options. `weights` is the model's flat buffer in its activation dtype.
// `lora`: adapters applied on top of the weights (model/lora/).
Generation generate(const Gemma4Model& model, const Tensor& weights, const Tokenizer& tokenizer,
                    const std::string& prompt, const SampleOptions& options,
                    const BoundAdapters& lora = {});

// The prompt followed by its generated continuation.
std::string generate_text(const Gemma4Model& model, const Tensor& weights,
                          const Tokenizer& tokenizer, const std::string& prompt,
                          const SampleOptions& options, const BoundAdapters& lora = {});

// "prompt 9 tokens | generated 64 tokens | prefill 1234.5 tokens/s | decode 456.7 tokens/s"
std::string generation_stats(const Generation& g);

}  // namespace gemmax

#include "gemmax/model/generate.h"

#include <algorithm>
#include <cstdio>

#include "gemmax/base/progress.h"
#include "gemmax/base/timer.h"
#include "gemmax/model/decode.h"

namespace gemmax {

double Generation::prefill_tokens_per_sec() const {
  return prefill_seconds > 0 ? double(prompt_ids.size()) / prefill_seconds : 0.0;
}

double Generation::decode_tokens_per_sec() const {
  return decode_seconds > 0 ? double(decode_steps) / decode_seconds : 0.0;
}

Generation generate(const Gemma4Model& model, const Tensor& weights, const Tokenizer& tokenizer,
                    const std::string& prompt, const SampleOptions& options,
                    const BoundAdapters& lora) {
  check_sample_options(options);
  const int64_t V = model.config().vocab_size;
  if (tokenizer.vocab_size() > V)
    fail("tokenizer ", tokenizer.describe(), " has a larger vocabulary than the model (", V,
         " tokens); use the tokenizer the model was trained with");
  if (prompt.empty()) fail("the prompt is empty; give some text for the model to continue");

  Generation g;
  if (tokenizer.bos_id() >= 0) g.prompt_ids.push_back(tokenizer.bos_id());
  for (int32_t id : tokenizer.encode(prompt)) g.prompt_ids.push_back(id);

  const AllocationScope what(str_cat("the KV cache and logits of ", g.prompt_ids.size(),
                                     " prompt tokens + ", options.max_new_tokens,
                                     " new ones (--max_new_tokens, or sample_max_new_tokens)"));
  Decoder decoder(
      model, weights,
      {int64_t(g.prompt_ids.size()) + options.max_new_tokens, /*prefill_chunk=*/0, lora});
  Sampler sampler(options);
  Timer timer;
  Progress progress("prefill", double(g.prompt_ids.size()), "tokens");
  Tensor logits = decoder.prefill(g.prompt_ids, nullptr, &progress);
  progress.finish();
  g.prefill_seconds = timer.seconds();
  timer.reset();
  for (;;) {
    const int32_t next = sampler.sample(logits);
    g.new_ids.push_back(next);
    if (options.stop_ids.empty()
            ? next == tokenizer.eos_id()
            : std::ranges::find(options.stop_ids, next) != options.stop_ids.end()) {
      g.stopped_at_eos = true;
      break;
    }
    if (int64_t(g.new_ids.size()) >= options.max_new_tokens) break;
    logits = decoder.step(next);
    ++g.decode_steps;
  }
  g.decode_seconds = timer.seconds();

  // Decoded together, so that a tokenizer that spells a token by its context (SentencePiece's
  // leading space) continues the prompt exactly.
  g.prompt_text = tokenizer.decode(g.prompt_ids);
  std::vector<int32_t> all = g.prompt_ids;
  all.insert(all.end(), g.new_ids.begin(), g.new_ids.end());
  const std::string full = tokenizer.decode(all);
  g.completion = full.starts_with(g.prompt_text) ? full.substr(g.prompt_text.size())
                                                 : tokenizer.decode(g.new_ids);
  return g;
}

std::string generate_text(const Gemma4Model& model, const Tensor& weights,
                          const Tokenizer& tokenizer, const std::string& prompt,
                          const SampleOptions& options, const BoundAdapters& lora) {
  const Generation g = generate(model, weights, tokenizer, prompt, options, lora);
  return g.prompt_text + g.completion;
}

std::string generation_stats(const Generation& g) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "prompt %zu tokens | generated %zu tokens%s | prefill %.1f tokens/s | "
                "decode %.1f tokens/s",
                g.prompt_ids.size(), g.new_ids.size(), g.stopped_at_eos ? " (eos)" : "",
                g.prefill_tokens_per_sec(), g.decode_tokens_per_sec());
  return buf;
}

}  // namespace gemmax

// What the decoding commands (sample, chat) share: a model folder's tokenizer, the sampling
// options (generation_config.json's defaults under the flags), and the model on a backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "flags.h"
#include "gemmax/backend/backend.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/data/tokenizer.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/lora/lora_params.h"
#include "gemmax/model/sampler.h"

namespace gemmax {

// The flags every decoding command takes, besides its own.
std::vector<FlagSpec> decoding_flags(std::vector<FlagSpec> own);
// The usage lines of those flags.
extern const char* const kDecodingFlagsUsage;

struct DecodingModel {
  std::unique_ptr<Tokenizer> tokenizer;
  LoadedModel loaded;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Gemma4Model> model;
  Tensor weights;  // on the backend
  // LoRA adapters on the weights (a LoRA run's checkpoint, or --adapter), applied unmerged.
  std::unique_ptr<AdapterTable> adapters;
  Tensor adapter_weights;  // on the backend
  BoundAdapters lora() const { return {adapters.get(), adapter_weights}; }
};

// --tokenizer / --tokenizer_path (default: byte, or DIR/tokenizer.model's SentencePiece).
std::unique_ptr<Tokenizer> decoding_tokenizer(const Flags& flags, const std::string& dir,
                                              const std::string& command);
// The options, announcing generation_config.json's defaults on stderr.
SampleOptions decoding_options(const Flags& flags, const std::string& dir,
                               int64_t default_max_new_tokens);
// The tokenizer first (a wrong one fails before a large model is read), then the model, with
// --adapter's PEFT folder on it.
DecodingModel load_decoding_model(const Flags& flags, const std::string& dir,
                                  const std::string& command);

}  // namespace gemmax

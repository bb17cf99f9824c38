// A LoRA run's settings from its configuration (docs/LORA.md): MaxText's lora: keys and PEFT's,
// or the PEFT adapter the run starts from (lora_restore_path, hf_lora_adapter_path), checked
// against each other.
#pragma once

#include <optional>
#include <string>

#include "gemmax/config/train_config.h"
#include "gemmax/model/lora/adapters.h"

namespace gemmax {

// The adapter folder a run starts from: lora_restore_path, else hf_lora_adapter_path ("": none).
std::string lora_adapter_source(const LoraConfig& c);

// Empty when enable_lora is false. Throws gemmax::Error naming the key for settings that
// contradict each other or the adapter folder's (its rank, alpha, targets), and for a LoRA
// setting without enable_lora.
std::optional<LoraOptions> lora_options(const TrainConfig& config);

// One line for the log: rank, alpha and scale, how many matrices of which kinds, how they were
// chosen.
std::string describe_adapters(const AdapterTable& adapters, const LoraConfig& config);

}  // namespace gemmax

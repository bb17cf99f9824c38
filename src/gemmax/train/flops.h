// Training FLOPs per device and step, counted as MaxText counts them for Gemma 4
// (docs/TRAINING.md §13, `calculate_tflops_training_per_device`): learnable-weight matmuls and
// attention, x3 for forward + backward; remat, routing, norms and softmax are not counted.
#pragma once

#include <cstdint>

#include "gemmax/config/model_config.h"
#include "gemmax/model/lora/adapters.h"

namespace gemmax {

struct StepFlops {
  double learnable = 0;  // weight matmuls, forward only
  double attention = 0;  // q.k and p.v, forward only
  double adapters = 0;   // a LoRA run's adapters' products, forward only
  double total() const { return 3.0 * (learnable + attention); }  // per step, fwd + bwd
  // A LoRA step: the frozen weights' products forward and back to their inputs (no weight
  // gradient), attention and the adapters forward and backward.
  double lora_total() const { return 2.0 * learnable + 3.0 * (attention + adapters); }
};

// batch = per_device_batch_size, seq = max_target_length (the padded length). With `adapters`,
// their products too: 2 r (in + out) a token per adapted matrix (a routed token's, on the
// experts').
StepFlops training_flops(const ModelConfig& cfg, int64_t batch, int64_t seq,
                         const AdapterTable* adapters = nullptr);

}  // namespace gemmax

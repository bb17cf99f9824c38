// An estimate of the memory per device of a training step sharded with FSDP over N devices
// (ici_fsdp_parallelism > 1), computed from the configuration for dry runs, until FSDP training
// exists and its plan is derived from its own allocation sequence like the single-device plan
// (train/memory_plan.h).
//
// It follows a step's phases (forward of each layer, the head, backward of each layer): the fp32
// weights, gradients and Adam moments are 1/N shards (norm scales replicated), and the workspace
// adds what FSDP holds per layer: the all-gathered bf16 weights of the running layer and of the
// prefetched next one, and in the backward the full-shape fp32 gradient of the layer's largest
// weight before its reduce-scatter. The embedding table stays sharded along the vocabulary (seed
// change 3): the head holds one tile of logits, never a gathered table.
#pragma once

#include "gemmax/train/memory_plan.h"

namespace gemmax {

MemoryPlan estimate_fsdp_memory(const MemoryPlanInput& input);

}  // namespace gemmax

// The memory plan of a training step, computed from the configuration alone (nothing is
// allocated), in the categories MemoryTracker measures (base/memory.h).
//
// On one device the plan mirrors what Gemma4Model::forward_backward allocates, tensor by tensor
// (tests check it against the measured peaks), through the phases of a step:
//   forward of layer l:  layer inputs x_0..x_l+1 and the kept activations of layers <= l, plus
//                        the layer's compute-dtype weights and its not-kept activations;
//   head:                every layer input and kept activation, dx, the compute-dtype table,
//                        one vocabulary tile ([C, V] logits and [C, D] buffers);
//   backward of layer l: x_0..x_l and kept activations of layers <= l, plus dx and dx_prev,
//                        the compute-dtype weights, the recomputed activations of the layer
//                        and the largest set of live backward temporaries.
// Saved activations peak at the head; workspace peaks in whichever phase is largest.
//
// With FSDP over N devices (fsdp > 1, for estimates: training runs on one device so far) the
// fp32 weights, gradients and Adam moments are 1/N shards (norm scales replicated), and the
// workspace adds what FSDP holds per layer: the all-gathered bf16 weights of the running layer
// and of the prefetched next one, and in the backward the full-shape fp32 gradient of the
// layer's largest weight before its reduce-scatter. The embedding table stays sharded along
// the vocabulary (seed change 3): the head holds one tile of logits, never a gathered table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gemmax/base/dtype.h"
#include "gemmax/base/memory.h"
#include "gemmax/base/strings.h"
#include "gemmax/config/model_config.h"
#include "gemmax/model/context.h"

namespace gemmax {

struct MemoryPlanInput {
  ModelConfig model;
  int64_t batch = 1, seq = 1;  // per device
  DType act = DType::BF16;     // `dtype`
  DType weight = DType::F32;   // `weight_dtype`: master weights, gradients, Adam moments
  RematPolicy remat = RematPolicy::Full;
  int64_t num_vocab_tiling = 1;
  int64_t fsdp = 1;  // devices the parameters are sharded over (ici_fsdp_parallelism)
  std::string freeze;  // frozen parameters have no Adam moments
};

struct MemoryPlan {
  struct Item {
    MemKind kind;
    std::string what;
    int64_t bytes;
  };
  MemoryPlanInput input;
  // The parts of each category at its peak (workspace: in the phase where it peaks).
  std::vector<Item> items;
  std::array<int64_t, kNumMemKinds> peak{};  // planned peak per category
  int64_t peak_total = 0;                    // planned peak of the sum (the largest phase)
  std::string workspace_phase;               // where the workspace peaks
  std::string total_phase;                   // where the total peaks
  // The workspace of the largest forward phase, the head, and the largest backward phase.
  std::string workspace_by_phase;
};

MemoryPlan plan_memory(const MemoryPlanInput& input);

// The bytes of one decoder layer's activations: those a `minimal` policy keeps (matmul
// outputs) and all of them (what `none` keeps; what `full` recomputes).
struct LayerActBytes {
  int64_t matmul = 0, all = 0;
};
LayerActBytes layer_activation_bytes(const ModelConfig& cfg, int64_t layer, int64_t batch,
                                     int64_t seq, DType act);

// A table of the plan; with `measured`, a column of the measured peaks beside it.
std::string format_memory_plan(const MemoryPlan& plan, const MemoryTracker* measured = nullptr);

}  // namespace gemmax

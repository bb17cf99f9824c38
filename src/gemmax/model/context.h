// What every layer of one training step shares: the backend, the model shape, the batch.
#pragma once

#include "gemmax/backend/backend.h"
#include "gemmax/config/model_config.h"
#include "gemmax/data/batch.h"

namespace gemmax {

class AttentionCore;  // model/attention.h

// One batch on the backend's device (int32 [B*S] each; see data/batch.h).
struct StepInputs {
  int64_t batch = 0, seq = 0;
  Tensor tokens, targets, positions, segment_ids, target_mask;
  int64_t num_targets = 0;  // real target tokens (target_mask != 0)
  int64_t tokens_count() const { return batch * seq; }
};
StepInputs upload_batch(Backend& be, const Batch& batch);

// RoPE inverse frequencies (fp64 [hd/2]): theta^(-2i/hd) for the first
// int(proportion * hd / 2) pairs, 0 (no rotation) for the rest (gemma4.md §4.2, §4.3).
Tensor rope_inv_freq(int64_t head_dim, double theta, double proportion);

struct LayerContext {
  Backend& be;
  const ModelConfig& cfg;
  const StepInputs& in;
  DType act;            // activation dtype
  Tensor rope_local;    // inv_freq of sliding layers
  Tensor rope_global;   // inv_freq of global layers
  double aux_weight;    // load_balance_loss_weight / num_layers: each layer's share of the loss
  // Where attention finds its keys and values: null (training) attends within the batch; the
  // decoder (model/decode.h) sets its KV cache here.
  AttentionCore* attention_core = nullptr;

  int64_t tokens() const { return in.tokens_count(); }
  Tensor alloc(const Shape& shape, MemKind kind = MemKind::Activations) const {
    return be.alloc(shape, act, kind);
  }
  Tensor alloc_stat(const Shape& shape, MemKind kind = MemKind::Activations) const {
    return be.alloc(shape, stat_dtype(act), kind);
  }
};

}  // namespace gemmax

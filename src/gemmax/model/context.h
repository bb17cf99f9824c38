// What every layer of one training step shares: the backend, the model shape, the batch.
#pragma once

#include <initializer_list>
#include <string>

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

// What the forward keeps for the backward (training.md §10). The backward of a layer first
// re-runs the layer's forward, which fills in only what was not kept.
enum class RematPolicy {
  None,     // keep every activation of every layer
  Minimal,  // keep the matmul outputs (q/k/v/out projections, MLP gate_up/down, router logits,
            // expert grouped-matmul outputs); recompute the rest
  Full,     // keep only each layer's input
};
// Throws gemmax::Error naming the key, the value and the valid names.
RematPolicy parse_remat_policy(const std::string& name);
const char* remat_policy_name(RematPolicy p);

// The two classes of forward activations the remat policies tell apart.
enum class ActClass { Matmul, Other };
inline bool remat_keeps(RematPolicy p, ActClass c) {
  return p == RematPolicy::None || (p == RematPolicy::Minimal && c == ActClass::Matmul);
}

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
  RematPolicy remat = RematPolicy::None;
  bool recompute = false;  // filling in a layer's activations inside its backward

  int64_t tokens() const { return in.tokens_count(); }
  // Plain allocations in the activation / statistics dtype (outside the remat machinery).
  Tensor alloc(const Shape& shape, MemKind kind = MemKind::Activations) const {
    return be.alloc(shape, act, kind);
  }
  Tensor alloc_stat(const Shape& shape, MemKind kind = MemKind::Activations) const {
    return be.alloc(shape, stat_dtype(act), kind);
  }

  // Forward activations. What the policy keeps is MemKind::Activations; the rest, and all
  // that the backward's recompute fills in, is Workspace: it lives only while its layer runs
  // (drop_unsaved() releases it at the end of the layer's forward).
  MemKind act_kind(ActClass c) const {
    return !recompute && remat_keeps(remat, c) ? MemKind::Activations : MemKind::Workspace;
  }
  Tensor act_tensor(const Shape& shape, ActClass c) const {
    return be.alloc(shape, act, act_kind(c));
  }
  Tensor stat_tensor(const Shape& shape, ActClass c) const {
    return be.alloc(shape, stat_dtype(act), act_kind(c));
  }
  Tensor int_tensor(const Shape& shape, ActClass c) const {
    return be.alloc(shape, DType::I32, act_kind(c));
  }
  // Transients of a backward.
  Tensor work(const Shape& shape) const { return be.alloc(shape, act, MemKind::Workspace); }
  Tensor work_stat(const Shape& shape) const {
    return be.alloc(shape, stat_dtype(act), MemKind::Workspace);
  }
};

// Releases every tensor that the remat policy does not keep (those not allocated as
// MemKind::Activations).
void drop_unsaved(std::initializer_list<Tensor*> tensors);

}  // namespace gemmax

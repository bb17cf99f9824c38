// What every layer of one training step shares: the backend, the model shape, the batch.
#pragma once

#include <string>

#include "gemmax/backend/backend.h"
#include "gemmax/config/model_config.h"
#include "gemmax/data/batch.h"

namespace gemmax {

class AttentionCore;  // model/attention.h
struct DonorKv;      // model/attention.h

// One batch on the backend's device (int32 [B*S] each; see data/batch.h).
struct StepInputs {
  int64_t batch = 0, seq = 0;
  Tensor tokens, targets, positions, segment_ids, target_mask;
  int64_t num_targets = 0;  // real target tokens (target_mask != 0)
  bool one_segment = false;  // every row's segment ids are one value (no packing, no padding)
  // Data parallelism: this batch is one of `replicas` equal batches of the global batch, which
  // has `total_targets` real targets. The cross-entropy is a mean over the global batch's targets
  // and the load-balance loss a mean over its sequences, as on one device with the whole batch.
  int64_t replicas = 1;
  int64_t total_targets = 0;
  int64_t tokens_count() const { return batch * seq; }
};
// The five int32 [B*S] tensors of a batch on the device (MemKind::Data), uninitialised.
StepInputs alloc_step_inputs(Backend& be, int64_t batch, int64_t seq);
// A batch uploaded to the device.
StepInputs upload_batch(Backend& be, const Batch& batch);

// RoPE inverse frequencies (fp64 [hd/2]): theta^(-2i/hd) for the first
// int(proportion * hd / 2) pairs, 0 (no rotation) for the rest (docs/MODEL.md §4.2, §4.3).
Tensor rope_inv_freq(int64_t head_dim, double theta, double proportion);
// The RoPE table [T, hd/2, 2] of a step's positions (Backend::rope_table), in the statistics
// dtype of `act`; one per kind of layer, shared by all its layers.
Tensor rope_table(Backend& be, const StepInputs& in, const Tensor& inv_freq, DType act);

// The two classes of forward activations the remat policies tell apart.
enum class ActClass { Matmul, Other };
inline bool remat_keeps(RematPolicy p, ActClass c) {
  return p == RematPolicy::None || (p == RematPolicy::Minimal && c == ActClass::Matmul);
}

// One block's forward activations, in two groups by the class they are allocated in: a field is
// declared in the group of its class (`Matmuls` or `Others`, plain structs of Tensors), and
// drop_unsaved() resets a group whole when the policy does not keep its class. A block's acts
// type is an alias of this template, so it has no fields outside the two groups and none can
// outlive its layer by being left off a list.
struct NoActs {};  // a block without activations of one class
template <class Matmuls, class Others>
struct RematActs : Matmuls, Others {
  // After the layer's forward: releases the groups the policy does not keep.
  void drop_unsaved(RematPolicy remat) {
    if (!remat_keeps(remat, ActClass::Matmul)) static_cast<Matmuls&>(*this) = Matmuls();
    if (!remat_keeps(remat, ActClass::Other)) static_cast<Others&>(*this) = Others();
  }
};

// How the model computes: dtypes, what is kept for the backward, and the switches of the seed's
// optimizations (each on by default, each off = the plain path it is tested against; docs/SEED.md).
struct ModelOptions {
  DType act = DType::F32;                 // activation / compute dtype (`dtype`)
  RematPolicy remat = RematPolicy::None;  // what the forward keeps (`remat_policy`)
  // The step's keys the model reads (keys.h says what each does): num_vocab_tiling, the seed's
  // switches and MaxText's precision keys.
  GEMMAX_MODEL_OPTION_KEYS(GEMMAX_KEY_FIELD)
  // MaxText's attention=dot_product with float32_qk_product=false, float32_logits=true: the
  // attention scores rounded to the activation dtype, softmax statistics in fp32 (false: fp32
  // scores, as MaxText's flash kernels and dot_product with float32_qk_product=true compute).
  bool attention_bf16_scores = false;
  // MaxText's attention=dot_product with float32_qk_product=false, float32_logits=false: the
  // softmax too in the activation dtype (AttentionShape::round_softmax).
  bool attention_bf16_softmax = false;
};

// The dtype of the output head's product: the table it reads and the logits it writes.
inline DType head_dot_dtype(const ModelOptions& o) {
  return o.logits_dot_in_fp32 && o.act == DType::BF16 ? DType::F32 : o.act;
}

struct LayerContext {
  Backend& be;
  const ModelConfig& cfg;
  const StepInputs& in;
  ModelOptions opt;
  Tensor rope_local;   // inv_freq of sliding layers
  Tensor rope_global;  // inv_freq of global layers
  double aux_weight;   // load_balance_loss_weight / num_layers: each layer's share of the loss
  // The device scalar the layers' load-balance losses add into (StepScalars::kLbSum of the step);
  // undefined: not summed (decoding, and the recompute inside a layer's backward).
  Tensor lb_loss;
  // Where attention finds its keys and values: null (training) attends within the batch; the
  // decoder (model/decode.h) sets its KV cache here.
  AttentionCore* attention_core = nullptr;
  // The small block (gemma4-e2b/e4b): the donors' K/V the sharing layers read (null without
  // sharing), and the per-layer inputs [L, T, P] with their gradient (undefined without them).
  DonorKv* donor_kv = nullptr;
  Tensor per_layer_inputs = {}, d_per_layer_inputs = {};
  bool recompute = false;  // filling in a layer's activations inside its backward

  DType act() const { return opt.act; }

  int64_t tokens() const { return in.tokens_count(); }
  // Plain allocations in the activation / statistics dtype (outside the remat machinery).
  Tensor alloc(const Shape& shape, MemKind kind = MemKind::Activations) const {
    return be.alloc(shape, act(), kind);
  }
  Tensor alloc_stat(const Shape& shape, MemKind kind = MemKind::Activations) const {
    return be.alloc(shape, stat_dtype(act()), kind);
  }

  // Forward activations. What the policy keeps is MemKind::Activations; the rest, and all
  // that the backward's recompute fills in, is Workspace: it lives only while its layer runs
  // (drop_unsaved() releases it at the end of the layer's forward).
  MemKind act_kind(ActClass c) const {
    return !recompute && remat_keeps(opt.remat, c) ? MemKind::Activations : MemKind::Workspace;
  }
  Tensor act_tensor(const Shape& shape, ActClass c) const {
    return be.alloc(shape, act(), act_kind(c));
  }
  Tensor stat_tensor(const Shape& shape, ActClass c) const {
    return be.alloc(shape, stat_dtype(act()), act_kind(c));
  }
  Tensor int_tensor(const Shape& shape, ActClass c) const {
    return be.alloc(shape, DType::I32, act_kind(c));
  }
  // y = [residual +] RMSNorm(x; w) * out_scale, with the model's eps and norm-scale rounding.
  void rmsnorm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w,
               double out_scale = 1.0, const Tensor& residual = Tensor()) const {
    be.rmsnorm_forward({.y = y,
                        .rstd = rstd,
                        .x = x,
                        .w = w,
                        .eps = cfg.norm_eps,
                        .out_scale = out_scale,
                        .residual = residual,
                        .round_before_scale = !opt.norm_scale_in_fp32});
  }

  // Where an op writes a weight vector's gradient: g, or for a frozen weight (g undefined) a zeroed
  // scratch vector like w, which nobody reads (the ops that fill several outputs at once always
  // write it).
  Tensor grad_or_scratch(const Tensor& g, const Tensor& w) const {
    return g.defined() ? g : be.zeros(w.shape(), w.dtype(), MemKind::Workspace);
  }

  // Transients of a backward.
  Tensor work(const Shape& shape) const { return be.alloc(shape, act(), MemKind::Workspace); }
  Tensor work_stat(const Shape& shape) const {
    return be.alloc(shape, stat_dtype(act()), MemKind::Workspace);
  }
};

}  // namespace gemmax

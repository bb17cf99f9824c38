// AdamW over a rank's flat parameter buffer, with clipping by global norm (docs/TRAINING.md §12).
//
// The buffer holds what the rank's ShardLayout says (parallel/shard_layout.h): every parameter on one
// device, this rank's pieces under FSDP. Frozen parameters (config `freeze`) have no optimizer
// state and are never updated; the moments hold the trainable pieces only, back to back in registry
// order.
#pragma once

#include <string>
#include <vector>

#include "gemmax/backend/backend.h"
#include "gemmax/base/named_tensors.h"
#include "gemmax/config/train_config.h"
#include "gemmax/parallel/shard_layout.h"
#include "gemmax/model/params.h"

namespace gemmax {

struct AdamWConfig {
  double b1 = 0.9, b2 = 0.95, eps = 1e-8, eps_root = 0.0;
  double weight_decay = 0.1;  // decoupled, scaled by the learning rate, on every parameter
  double clip_norm = 1.0;     // gradient_clipping_threshold; 0: no clipping
  // embedding_table=maxtext: the embedding is trained as MaxText stores it, sqrt(D) times HF's
  // table (docs/TRAINING.md §12): its gradient is divided by sqrt(D) before the norm and the
  // moments, its step by sqrt(D), its weight decay unchanged.
  bool maxtext_embedding_table = false;
  static AdamWConfig from(const OptimizerConfig& config);
};

// A non-finite gradient element: element `element` of registry entry `spec`'s gradient is `value`.
struct NonfiniteGradient {
  int64_t spec = -1, element = 0;
  double value = 0;
};

class AdamW {
 public:
  // `trainable[i]` says whether table.specs()[i] is trained; `layout` places each piece.
  AdamW(Backend& be, const ParamTable& table, const ShardLayout& layout,
        const std::vector<bool>& trainable, DType dtype, const AdamWConfig& config);

  // One update of `weights` from `grads` (flat buffers laid out by the layout); `t` is the 1-based
  // update count. Writes the gradient's sum of squares over the trainable parameters into
  // scalars[kGradSumSq], clips by its square root and applies AdamW, on the device; the update is
  // skipped if any of the step's scalars is not finite (Backend::adamw_step).
  void step(const Tensor& weights, const Tensor& grads, const Tensor& scalars, double lr,
            int64_t t);
  // The two halves of step() for a sharded run, which sums the squares of the sharded pieces
  // across ranks before adding those of the replicated parameters (the same on every rank):
  // sum[0] += the sum of squares of the trainable pieces that are (not) replicated. Both it and
  // step() first bring the gradients into the optimizer's units, in place (embedding_table).
  void sum_squares(const Tensor& grads, const Tensor& sum, bool replicated) const;
  void apply(const Tensor& weights, const Tensor& grads, const Tensor& scalars, double lr,
             int64_t t) const;
  const AdamWConfig& config() const { return cfg_; }

  // The first trainable parameter held here, in registry order, whose gradient holds a NaN or an
  // infinity (spec -1: none). Reads the gradients back one piece at a time: for naming the
  // culprit of a non-finite step, not for every step.
  NonfiniteGradient first_nonfinite_gradient(const Tensor& grads) const;

  // The moments of each trainable parameter held here, named "mu.<name>" and "nu.<name>" (views:
  // the parameter's shape when held whole, else its piece, flat).
  NamedTensors named_state() const;
  // The moments (mu, nu) of registry entry `spec`'s piece on this rank, flat; undefined if it is
  // frozen or has no piece here.
  std::pair<Tensor, Tensor> moments_of(size_t spec) const;

 private:
  // A run of adjacent trainable pieces: [begin, begin + count) of the flat buffers,
  // [state_begin, state_begin + count) of the moments.
  // `units`: how many times larger the optimizer's parameter is than the stored one (sqrt(D) for
  // the embedding under embedding_table=maxtext, else 1).
  struct Segment {
    int64_t begin, count, state_begin;
    bool replicated;
    double units = 1.0;
  };
  // Brings segment `s`'s gradient into the optimizer's units and adds its squares to `sum`.
  void add_squares(const Segment& s, const Tensor& grads, const Tensor& sum) const;

  Backend& be_;
  const ParamTable& table_;
  ShardLayout layout_;
  std::vector<bool> trainable_;
  AdamWConfig cfg_;
  std::vector<Segment> segments_;
  std::vector<int64_t> state_offset_;  // per registry entry: where its moments start, or -1
  Tensor m_, v_;
};

}  // namespace gemmax

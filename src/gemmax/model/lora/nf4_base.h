// QLoRA's frozen base (lora_weight_qtype=nf4, docs/LORA.md): the matrices of the decoder layers
// (and the small block's per_layer_model_projection) as NF4 blocks of `block` elements with an
// fp32 absmax each, in bitsandbytes' format (base/nf4.h), each matrix quantised on its own as
// bitsandbytes quantises each Linear's weight; the embedding tables and the vectors in the compute
// dtype, as bitsandbytes leaves them. As a layer runs its matrices are dequantised into one
// workspace buffer, in registry order (so mlp.gate_proj and mlp.up_proj stay one fused matrix),
// which lives while the layer does.
#pragma once

#include <vector>

#include "gemmax/model/step_params.h"

namespace gemmax {

// Where each registry entry lives: in `dense` (the compute dtype, whole on every rank) or as codes
// and absmax in its group. A group is the quantised matrices of one layer (layer -1: the small
// block's per_layer_model_projection), their codes back to back in registry order and their absmax
// likewise. On one rank a group's codes sit whole at `code_local`; under FSDP over N ranks
// each rank holds piece `rank` of N equal pieces (zero-padded) of each, gathered as the layer runs.
struct Nf4Layout {
  struct Group {
    int64_t layer = -1;
    int64_t code_full = 0, code_piece = 0, code_local = 0;     // bytes
    int64_t scale_full = 0, scale_piece = 0, scale_local = 0;  // absmax floats
  };
  int64_t block = 64;
  int ranks = 1, rank = 0;
  std::vector<bool> quantised;  // per registry entry
  std::vector<int64_t> dense;   // its offset in `dense`, or -1
  std::vector<int> group;       // its group, or -1
  std::vector<int64_t> codes;   // its first code byte in its group's codes, or -1
  std::vector<int64_t> scales;  // its first absmax in its group's absmax, or -1
  std::vector<Group> groups;
  // Elements this rank holds: dense values, code bytes, absmax floats.
  int64_t dense_total = 0, code_bytes = 0, blocks = 0;
  // Of the whole model (every rank's pieces, without padding).
  int64_t model_code_bytes = 0, model_blocks = 0;
  static Nf4Layout of(const ParamTable& table, int64_t block, int ranks = 1, int rank = 0);
  int group_of_layer(int64_t layer) const;  // -1: none
};

struct Nf4Base {
  Nf4Layout layout;
  Tensor dense;   // compute dtype (MemKind::Params)
  Tensor codes;   // uint8 [code_bytes]
  Tensor absmax;  // float32 [blocks]
};

// Allocates the base on the backend (uninitialised): rank `rank` of `ranks`'s share.
Nf4Base alloc_nf4_base(Backend& be, const ParamTable& table, DType act, int64_t block,
                       int ranks = 1, int rank = 0);

// Fills `base` parameter by parameter (a model's weights need not exist whole anywhere: a 4-bit
// base is for machines that could not hold them): put() each parameter's values (host, any
// float dtype), then finish(). A host backend's buffers are written in place. Under FSDP each
// rank puts every parameter and keeps its pieces (the quantisation is per block, so a piece is
// the same bytes whichever rank quantised the matrix).
class Nf4Filler {
 public:
  Nf4Filler(Backend& be, const ParamTable& table, Nf4Base& base);
  void put(const ParamSpec& spec, const Tensor& values);
  // Where a parameter that is not quantised lives in the (host) buffer put() writes: to draw it in
  // place; undefined for a quantised one.
  Tensor dense_view(const ParamSpec& spec) const;
  void finish();

 private:
  Backend& be_;
  const ParamTable& table_;
  Nf4Base& base_;
  Tensor dense_, codes_, absmax_;  // host: the base's own buffers, or staging copies
};

// Quantises whole-model weights (host, laid out like the table, any float dtype) into `base`.
void upload_nf4_base(Backend& be, const ParamTable& table, Nf4Base& base, const Tensor& full);
// The weights the NF4 base stands for (host, laid out like the table, in `dtype`): its matrices
// dequantised, the rest as stored. What a QLoRA run's adapters were trained against.
Tensor nf4_round_trip(const ParamTable& table, const Tensor& full, int64_t block, DType dtype);

// The StepParams of the NF4 base: frozen (no gradients), its matrices dequantised per layer from
// their group's codes and absmax (group_whole; under FSDP, parallel/fsdp_nf4.h gathers them).
class Nf4Params : public StepParams {
 public:
  Nf4Params(Backend& be, const ParamTable& table, const ModelOptions& opt, const Nf4Base& base);

  Tensor embed(const StepInputs& in) override;
  LayerWeights layer(int64_t l, Pass pass) override;
  LayerWeights layer_grads(int64_t) override { return LayerWeights(); }
  void layer_done(int64_t, Pass) override {}
  void head(const StepInputs& in, const Tensor& x, double grad_scale, const Tensor& loss,
            const Tensor& dx) override;
  void embed_backward(const StepInputs&, const Tensor&) override {}
  PerLayerInputWeights per_layer_weights() override;
  PerLayerInputWeights per_layer_grads() override { return {}; }

 protected:
  // Group g's codes (uint8) and absmax (float32), whole: on one rank, views of the base.
  virtual void group_whole(int g, Tensor& codes, Tensor& absmax);

  Backend& be_;
  const ParamTable& table_;
  ModelOptions opt_;
  const Nf4Base& base_;

 private:
  Tensor dense_view(const ParamSpec& s) const;
  // The matrices of group g (of `layer`), dequantised into one buffer, in registry order; `at`:
  // each registry entry's offset there, or -1.
  Tensor dequantise_group(int64_t layer, std::vector<int64_t>& at);
};

}  // namespace gemmax

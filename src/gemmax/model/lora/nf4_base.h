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

// Where each registry entry lives: in `dense` (the compute dtype) or as codes and absmax.
struct Nf4Layout {
  int64_t block = 64;
  std::vector<bool> quantised;  // per registry entry
  std::vector<int64_t> dense;   // its offset in `dense`, or -1
  std::vector<int64_t> codes;   // its first code byte, or -1
  std::vector<int64_t> scales;  // its first absmax, or -1
  int64_t dense_total = 0, code_bytes = 0, blocks = 0;
  static Nf4Layout of(const ParamTable& table, int64_t block);
};

struct Nf4Base {
  Nf4Layout layout;
  Tensor dense;   // compute dtype (MemKind::Params)
  Tensor codes;   // uint8 [code_bytes]
  Tensor absmax;  // float32 [blocks]
};

// Allocates the base on the backend (uninitialised).
Nf4Base alloc_nf4_base(Backend& be, const ParamTable& table, DType act, int64_t block);

// Fills `base` parameter by parameter (a model's weights need not exist whole anywhere: a 4-bit
// base is for machines that could not hold them): put() each parameter's values (host, any
// float dtype), then finish(). A host backend's buffers are written in place.
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

// The StepParams of the NF4 base: frozen (no gradients), its matrices dequantised per layer.
class Nf4Params final : public StepParams {
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

 private:
  Tensor dense_view(const ParamSpec& s) const;
  // The quantised matrices among `specs`, dequantised into one buffer; their views by name.
  ParamLocation dequantise(const std::vector<const ParamSpec*>& specs, Tensor& buffer) const;

  Backend& be_;
  const ParamTable& table_;
  ModelOptions opt_;
  const Nf4Base& base_;
};

}  // namespace gemmax

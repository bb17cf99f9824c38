#include "gemmax/model/lora/lora_params.h"

namespace gemmax {

LoraParams::LoraParams(Backend& be, StepParams& base, const AdapterTable& adapters,
                       const ModelOptions& opt, const Tensor& weights, const Tensor& grads,
                       std::optional<DropoutStep> dropout_seed)
    : be_(be),
      base_(base),
      adapters_(adapters),
      opt_(opt),
      weights_(weights),
      grads_(grads),
      seed_(dropout_seed) {}

namespace {

LoraPair compute_pair(Backend& be, const LoraPair& master, DType dtype) {
  LoraPair c = master;
  c.a = compute_copy(be, master.a, dtype);
  c.b = compute_copy(be, master.b, dtype);
  return c;
}

}  // namespace

LayerAdapters compute_adapters(Backend& be, const AdapterTable& adapters, const Tensor& weights,
                               int64_t layer, const ModelOptions& opt,
                               std::optional<DropoutStep> dropout_seed) {
  LayerAdapters c = adapters.bind_layer(weights, layer, dropout_seed);
  const DType act = opt.act;
  // The router's product runs in fp32 with float32_gate_logits (model/moe.cc).
  const DType gate = opt.float32_gate_logits && act == DType::BF16 ? DType::F32 : act;
  for (LoraPair* p :
       {&c.q_proj, &c.k_proj, &c.v_proj, &c.o_proj, &c.mlp_gate, &c.mlp_up, &c.mlp_down,
        &c.router_proj, &c.experts_gate_up, &c.experts_down, &c.pli_gate, &c.pli_proj})
    if (p->defined()) *p = compute_pair(be, *p, p == &c.router_proj ? gate : act);
  return c;
}

LoraPair compute_model_proj_adapter(Backend& be, const AdapterTable& adapters,
                                    const Tensor& weights, const ModelOptions& opt,
                                    std::optional<DropoutStep> dropout_seed) {
  const LoraPair m = adapters.bind_model_proj(weights, dropout_seed);
  return m.defined() ? compute_pair(be, m, opt.act) : m;
}

LayerWeights LoraParams::layer(int64_t l, Pass pass) {
  LayerWeights w = base_.layer(l, pass);
  w.lora = compute_adapters(be_, adapters_, weights_, l, opt_, seed_);
  return w;
}

LayerWeights LoraParams::layer_grads(int64_t l) {
  LayerWeights g = base_.layer_grads(l);
  if (grads_.defined()) g.lora = adapters_.bind_layer(grads_, l);
  return g;
}

PerLayerInputWeights LoraParams::per_layer_weights() {
  PerLayerInputWeights w = base_.per_layer_weights();
  w.model_proj_lora = compute_model_proj_adapter(be_, adapters_, weights_, opt_, seed_);
  return w;
}

PerLayerInputWeights LoraParams::per_layer_grads() {
  PerLayerInputWeights g = base_.per_layer_grads();
  if (grads_.defined()) g.model_proj_lora = adapters_.bind_model_proj(grads_);
  return g;
}

}  // namespace gemmax

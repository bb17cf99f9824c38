#include "gemmax/model/weights.h"

#include <string>

namespace gemmax {

LayerWeights bind_layer(const ParamTable& table, int64_t layer, const ParamLocator& locate) {
  const std::string p = "layers." + std::to_string(layer) + ".";
  auto v = [&](const std::string& name) {
    const ParamSpec& s = table.at(p + name);
    const ParamLocation at = locate(s);
    return at.buffer.flat_slice(at.offset, s.shape);
  };
  LayerWeights w;
  w.input_norm = v("input_layernorm.weight");
  w.q_proj = v("self_attn.q_proj.weight");
  const bool own_kv = !table.config().kv_shared(layer);  // else the donor's K/V, no weights
  if (own_kv) w.k_proj = v("self_attn.k_proj.weight");
  if (own_kv && table.config().layer_has_v_proj(layer)) w.v_proj = v("self_attn.v_proj.weight");
  w.o_proj = v("self_attn.o_proj.weight");
  w.q_norm = v("self_attn.q_norm.weight");
  if (own_kv) w.k_norm = v("self_attn.k_norm.weight");
  w.post_attn_norm = v("post_attention_layernorm.weight");
  w.pre_mlp_norm = v("pre_feedforward_layernorm.weight");
  const ParamSpec& gate = table.at(p + "mlp.gate_proj.weight");
  const ParamSpec& up = table.at(p + "mlp.up_proj.weight");
  const ParamLocation g = locate(gate), u = locate(up);
  GEMMAX_CHECK(u.buffer.shares_storage(g.buffer) && u.offset == g.offset + gate.numel(),
               "mlp.up_proj must follow mlp.gate_proj");
  w.mlp_gate_up = g.buffer.flat_slice(g.offset, {2 * gate.shape[0], gate.shape[1]});
  w.mlp_down = v("mlp.down_proj.weight");
  if (table.config().has_moe()) {  // the dense layer binds none of these
    w.post_mlp_norm = v("post_feedforward_layernorm_1.weight");
    w.router_proj = v("router.proj.weight");
    w.router_scale = v("router.scale");
    w.router_expert_scale = v("router.per_expert_scale");
    w.pre_moe_norm = v("pre_feedforward_layernorm_2.weight");
    w.experts_gate_up = v("experts.gate_up_proj");
    w.experts_down = v("experts.down_proj");
    w.post_moe_norm = v("post_feedforward_layernorm_2.weight");
  }
  w.post_ffw_norm = v("post_feedforward_layernorm.weight");
  if (table.config().has_per_layer_inputs()) {
    w.pli_gate = v("per_layer_input_gate.weight");
    w.pli_proj = v("per_layer_projection.weight");
    w.pli_post_norm = v("post_per_layer_input_norm.weight");
  }
  w.layer_scalar = v("layer_scalar");
  return w;
}

LayerWeights bind_layer(const ParamTable& table, const Tensor& flat, int64_t layer) {
  return bind_layer(table, layer, [&](const ParamSpec& s) {
    return ParamLocation{flat, s.offset};
  });
}

ModelWeights bind_model(const ParamTable& table, const Tensor& flat) {
  ModelWeights m;
  m.embed = table.view(flat, "embed_tokens.weight");
  m.final_norm = table.view(flat, "norm.weight");
  if (table.config().has_per_layer_inputs())
    m.per_layer = {table.view(flat, "embed_tokens_per_layer.weight"),
                   table.view(flat, "per_layer_model_projection.weight"),
                   table.view(flat, "per_layer_projection_norm.weight"), {}};
  for (int64_t l = 0; l < table.config().num_layers; ++l)
    m.layers.push_back(bind_layer(table, flat, l));
  return m;
}

Tensor compute_copy(Backend& be, const Tensor& master, DType act) {
  if (!master.defined() || master.dtype() == act) return master;
  Tensor c = be.alloc(master.shape(), act, MemKind::Workspace);
  be.copy({.dst = c, .src = master});
  return c;
}

LayerWeights compute_weights(Backend& be, const LayerWeights& master, DType act,
                             bool fp32_router) {
  LayerWeights c = master;
  // float32_gate_logits widens a bf16 run's router; an fp32 or fp64 run's is in its own dtype.
  const DType router = fp32_router && act == DType::BF16 ? DType::F32 : act;
  for (Tensor* m : {&c.q_proj, &c.k_proj, &c.v_proj, &c.o_proj, &c.mlp_gate_up, &c.mlp_down,
                    &c.router_proj, &c.experts_gate_up, &c.experts_down, &c.pli_gate, &c.pli_proj})
    *m = compute_copy(be, *m, m == &c.router_proj ? router : act);
  return c;
}

}  // namespace gemmax

#include "gemmax/model/params.h"

#include <cmath>
#include <regex>

#include "gemmax/base/error.h"
#include "gemmax/base/rng.h"

namespace gemmax {

ParamTable::ParamTable(const ModelConfig& c) : config_(c) {
  c.validate();
  const int64_t D = c.d_model, E = c.num_experts, F = c.moe_mlp_dim;
  constexpr FsdpRole M = FsdpRole::LayerMatrix, V = FsdpRole::SmallVector;
  add("embed_tokens.weight", {c.vocab_size, D}, ParamInit::Embedding, -1, FsdpRole::VocabRows);
  if (c.has_per_layer_inputs()) {  // the small block's per-layer inputs (model/per_layer_inputs.h)
    const int64_t LP = c.num_layers * c.per_layer_input_dim;
    add("embed_tokens_per_layer.weight", {c.per_layer_vocab, LP}, ParamInit::Embedding, -1,
        FsdpRole::VocabRows);
    add("per_layer_model_projection.weight", {LP, D}, ParamInit::Dense, -1, M);
    add("per_layer_projection_norm.weight", {c.per_layer_input_dim}, ParamInit::Ones, -1, V);
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const int64_t hd = c.layer_head_dim(l), kv = c.layer_kv_heads(l), H = c.num_heads;
    add(p + "input_layernorm.weight", {D}, ParamInit::Ones, l, V);
    const bool own_kv = !c.kv_shared(l);  // a K/V-sharing layer has no k/v weights
    add(p + "self_attn.q_proj.weight", {H * hd, D}, ParamInit::Query, l, M);
    if (own_kv) add(p + "self_attn.k_proj.weight", {kv * hd, D}, ParamInit::Attention, l, M);
    if (own_kv && c.layer_has_v_proj(l))
      add(p + "self_attn.v_proj.weight", {kv * hd, D}, ParamInit::Attention, l, M);
    add(p + "self_attn.o_proj.weight", {D, H * hd}, ParamInit::Attention, l, M);
    add(p + "self_attn.q_norm.weight", {hd}, ParamInit::Ones, l, V);
    if (own_kv) add(p + "self_attn.k_norm.weight", {hd}, ParamInit::Ones, l, V);
    add(p + "post_attention_layernorm.weight", {D}, ParamInit::Ones, l, V);
    add(p + "pre_feedforward_layernorm.weight", {D}, ParamInit::Ones, l, V);
    const int64_t Fs = c.layer_mlp_dim(l);
    add(p + "mlp.gate_proj.weight", {Fs, D}, ParamInit::Dense, l, M);  // then up_proj:
    add(p + "mlp.up_proj.weight", {Fs, D}, ParamInit::Dense, l, M);    // one [2F, D]
    add(p + "mlp.down_proj.weight", {D, Fs}, ParamInit::Dense, l, M);
    if (c.has_moe()) {  // the dense layer (gemma4-31b) has the MLP alone
      add(p + "post_feedforward_layernorm_1.weight", {D}, ParamInit::Ones, l, V);
      add(p + "router.proj.weight", {E, D}, ParamInit::Dense, l, M);
      add(p + "router.scale", {D}, ParamInit::Ones, l, V);
      add(p + "router.per_expert_scale", {E}, ParamInit::Ones, l, V);
      add(p + "pre_feedforward_layernorm_2.weight", {D}, ParamInit::Ones, l, V);
      add(p + "experts.gate_up_proj", {E, 2 * F, D}, ParamInit::ExpertIn, l, M, true);
      add(p + "experts.down_proj", {E, D, F}, ParamInit::ExpertOut, l, M, true);
      add(p + "post_feedforward_layernorm_2.weight", {D}, ParamInit::Ones, l, V);
    }
    add(p + "post_feedforward_layernorm.weight", {D}, ParamInit::Ones, l, V);
    if (c.has_per_layer_inputs()) {
      const int64_t P = c.per_layer_input_dim;
      add(p + "per_layer_input_gate.weight", {P, D}, ParamInit::Dense, l, M);
      add(p + "per_layer_projection.weight", {D, P}, ParamInit::Dense, l, M);
      add(p + "post_per_layer_input_norm.weight", {D}, ParamInit::Ones, l, V);
    }
    add(p + "layer_scalar", {1}, ParamInit::Ones, l, V);
  }
  add("norm.weight", {D}, ParamInit::Ones, -1, V);
}

ParamTable::ParamTable(const ModelConfig& c, const std::vector<ParamSpec>& specs) : config_(c) {
  for (const ParamSpec& s : specs) add(s.name, s.shape, s.init, s.layer, s.fsdp, s.routed_expert);
}

void ParamTable::add(std::string name, Shape shape, ParamInit init, int64_t layer, FsdpRole fsdp,
                     bool routed_expert) {
  ParamSpec s{std::move(name), std::move(shape), init, layer, total_, routed_expert, fsdp};
  total_ += s.numel();
  index_[s.name] = specs_.size();
  specs_.push_back(std::move(s));
}

const ParamSpec* ParamTable::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &specs_[it->second];
}

const ParamSpec& ParamTable::at(const std::string& name) const {
  const ParamSpec* s = find(name);
  if (s == nullptr) fail("model '", config_.name, "' has no parameter '", name, "'");
  return *s;
}

int64_t ParamTable::active() const {
  const ModelConfig& c = config_;
  int64_t n = 0;
  for (const ParamSpec& s : specs_)
    n += s.routed_expert ? s.numel() / c.num_experts * c.num_experts_per_tok : s.numel();
  return n;
}

Tensor ParamTable::view(const Tensor& flat, const std::string& name) const {
  const ParamSpec& s = at(name);
  return flat.flat_slice(s.offset, s.shape);
}

InitDistribution init_distribution(const ModelConfig& c, const ParamSpec& s) {
  GEMMAX_CHECK(
      s.init != ParamInit::Ones && s.init != ParamInit::LoraA && s.init != ParamInit::Zeros,
      "init_distribution: ", s.name, " is not drawn from a normal");
  if (c.init_scheme == InitScheme::Hf) return {c.initializer_range, false};
  // MaxText: std = sqrt(scale / fan_in), fan_in counted on MaxText's layout of the kernel.
  auto scaled = [](double fan_in, double scale = 1.0) { return std::sqrt(scale / fan_in); };
  const double in = double(s.shape.back()), s1 = double(s.shape[1]), scale = c.dense_init_scale;
  switch (s.init) {
    case ParamInit::Embedding:  // N(0, 1) on MaxText's table, which is √D times ours
      if (s.name == "embed_tokens_per_layer.weight")  // N(0, 1/P), scaled by √P in use
        return {1.0 / std::sqrt(double(c.per_layer_input_dim)), false};
      return {1.0 / std::sqrt(double(c.d_model)), false};
    case ParamInit::Query:  // divided by √hd at initialisation (use_qk_norm stays false)
      return {scaled(in) / std::sqrt(double(c.layer_head_dim(s.layer))), false};
    case ParamInit::Attention:
      return {scaled(in), false};
    case ParamInit::Dense:
      return {scaled(in, scale), true};
    case ParamInit::ExpertIn:  // wi [E, D, F] with in_axis 0: fan_in = E·F
      return {scaled(double(s.shape[0]) * s1 / 2, scale), true};
    case ParamInit::ExpertOut:  // wo [E, F, D] with in_axis 0: fan_in = E·D
      return {scaled(double(s.shape[0]) * s1, scale), true};
    case ParamInit::Ones:
    case ParamInit::LoraA:
    case ParamInit::Zeros:
      break;
  }
  fail("init_distribution: no rule for ", s.name);
}

void init_param_range(const ParamTable& table, const ParamSpec& s, int64_t begin, const Tensor& out,
                      uint64_t seed) {
  const int64_t count = out.numel();
  GEMMAX_CHECK(begin >= 0 && begin + count <= s.numel(), "init_param_range: [", begin, ", ",
               begin + count, ") of ", s.name, " ", shape_str(s.shape));
  if (s.init == ParamInit::Ones || s.init == ParamInit::Zeros) {
    const double v = s.init == ParamInit::Ones ? 1.0 : 0.0;
    for (int64_t j = 0; j < count; ++j) set_from_double(out, j, v);
    return;
  }
  uint64_t stream = 1469598103934665603ull;  // FNV-1a of the name
  for (char ch : s.name) stream = (stream ^ uint8_t(ch)) * 1099511628211ull;
  Rng rng(seed, stream);
  if (s.init == ParamInit::LoraA) {  // kaiming_uniform(a=sqrt(5)) on A's rows of `in` elements
    const double bound = 1.0 / std::sqrt(double(s.shape.back()));
    rng.discard(uint64_t(begin));  // each uniform() draws one
    for (int64_t j = 0; j < count; ++j) set_from_double(out, j, bound * (2 * rng.uniform() - 1));
    return;
  }
  const InitDistribution d = init_distribution(table.config(), s);
  if (!d.truncated) {
    rng.discard(2 * uint64_t(begin));  // each normal() draws two
    for (int64_t j = 0; j < count; ++j) set_from_double(out, j, d.std * rng.normal());
    return;
  }
  // The cut normal's own standard deviation, as JAX divides by it.
  constexpr double kTruncatedStd = 0.87962566103423978;
  rng.discard(uint64_t(begin));  // each truncated_normal() draws one
  for (int64_t j = 0; j < count; ++j)
    set_from_double(out, j, d.std / kTruncatedStd * rng.truncated_normal());
}

void init_params(const ParamTable& table, const Tensor& flat, uint64_t seed) {
  GEMMAX_CHECK(flat.numel() == table.total(), "init_params: flat buffer ", flat.str(), " for ",
               table.total(), " parameters");
  // Each parameter has its own stream: they fill in parallel with the same values.
  const std::vector<ParamSpec>& specs = table.specs();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < specs.size(); ++i)
    init_param_range(table, specs[i], 0, flat.flat_slice(specs[i].offset, {specs[i].numel()}),
                     seed);
}

std::vector<bool> trainable_params(const ParamTable& table, const std::string& freeze) {
  std::vector<bool> trainable(table.specs().size(), true);
  if (freeze.empty()) return trainable;
  std::regex re;
  try {
    re = std::regex(freeze, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    fail("freeze='", freeze, "' is not a valid regular expression: ", e.what());
  }
  int64_t frozen = 0;
  for (size_t i = 0; i < trainable.size(); ++i)
    if (std::regex_search("model." + table.specs()[i].name, re)) trainable[i] = false, ++frozen;
  if (frozen == 0)
    fail("freeze='", freeze,
         "' matches no parameter (names look like "
         "'model.layers.0.self_attn.q_proj.weight')");
  if (frozen == int64_t(trainable.size()))
    fail("freeze='", freeze, "' matches every parameter: nothing would be trained");
  return trainable;
}

}  // namespace gemmax

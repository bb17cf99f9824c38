#include "gemmax/model/lora/adapters.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"
#include "gemmax/data/hf_regex.h"

namespace gemmax {

const char* const kMaxTextGemma4ModulePath =
    "decoder/((scanned_blocks|layers_remainder)/)?layers.*/"
    ".*(self_attention/(query|key|value|out)|mlp/.*(wi_0|wi_1|wo))";

double LoraShape::scale() const {
  return rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank);
}

std::vector<LoraTarget> AdapterTable::candidates(const ParamTable& base) {
  const ModelConfig& c = base.config();
  std::vector<LoraTarget> out;
  for (const ParamSpec& s : base.specs()) {
    if (s.fsdp != FsdpRole::LayerMatrix) continue;  // vectors and the embedding tables
    const std::string layer = "decoder/layers_" + std::to_string(s.layer) + "/";
    const std::string mlp = c.has_moe() ? layer + "mlp/moe_block/shared_experts/" : layer + "mlp/";
    const std::string experts = layer + "mlp/moe_block/MoeBlock_0/";
    LoraTarget t;
    t.layer = s.layer;
    t.weight = s.name;
    t.module = s.name.substr(0, s.name.rfind('.'));  // "....q_proj.weight" -> "....q_proj"
    const std::string leaf = s.name.substr(s.name.rfind('.') + 1);
    auto set = [&](LoraSite site, std::vector<std::string> paths) {
      t.site = site;
      t.maxtext_paths = std::move(paths);
    };
    if (s.routed_expert) {  // experts.gate_up_proj [E, 2F, D], experts.down_proj [E, D, F]
      t.module = s.name.substr(0, s.name.rfind('.'));
      t.parameter = leaf;
      t.experts = s.shape[0];
      if (leaf == "gate_up_proj")
        set(LoraSite::ExpertsGateUp, {experts + "wi_0", experts + "wi_1"});
      else
        set(LoraSite::ExpertsDown, {experts + "wo"});
    } else if (t.module.ends_with("self_attn.q_proj")) {
      set(LoraSite::QProj, {layer + "self_attention/query"});
    } else if (t.module.ends_with("self_attn.k_proj")) {
      set(LoraSite::KProj, {layer + "self_attention/key"});
    } else if (t.module.ends_with("self_attn.v_proj")) {
      set(LoraSite::VProj, {layer + "self_attention/value"});
    } else if (t.module.ends_with("self_attn.o_proj")) {
      set(LoraSite::OProj, {layer + "self_attention/out"});
    } else if (t.module.ends_with("mlp.gate_proj")) {
      set(LoraSite::MlpGate, {mlp + "wi_0"});
    } else if (t.module.ends_with("mlp.up_proj")) {
      set(LoraSite::MlpUp, {mlp + "wi_1"});
    } else if (t.module.ends_with("mlp.down_proj")) {
      set(LoraSite::MlpDown, {mlp + "wo"});
    } else if (t.module.ends_with("router.proj")) {
      set(LoraSite::RouterProj, {experts + "gate"});
    } else if (t.module.ends_with("per_layer_input_gate")) {
      set(LoraSite::PliGate, {layer + "per_layer_input_gate"});
    } else if (t.module.ends_with("per_layer_projection")) {
      set(LoraSite::PliProj, {layer + "per_layer_projection"});
    } else if (t.module == "per_layer_model_projection") {
      set(LoraSite::ModelProj, {"decoder/per_layer_embedder/per_layer_model_projection"});
    } else {
      fail("LoRA: no adapter site for the matrix ", s.name);
    }
    t.in = s.shape.back();
    t.out = s.shape[s.shape.size() - 2];
    const std::string stem = t.parameter.empty() ? t.module : t.module + "." + t.parameter;
    t.a_name = stem + ".lora_A";
    t.b_name = stem + ".lora_B";
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

// The `n` names nearest to `what`, one line of them.
std::string nearest_names(const std::string& what, const std::set<std::string>& names,
                          size_t n = 4) {
  std::vector<std::pair<size_t, std::string>> d;
  for (const std::string& s : names) d.push_back({edit_distance(what, s), s});
  std::sort(d.begin(), d.end());
  std::string out;
  for (size_t i = 0; i < std::min(n, d.size()); ++i) out += (i ? ", " : "") + d[i].second;
  return out;
}

// PEFT's match of a name list: the key itself or a dotted suffix of it, on the module's names in
// both of transformers' Gemma-4 classes (text-only and multimodal).
bool peft_name_matches(const std::string& module, const std::string& target) {
  for (const std::string& key : {module, "model." + module, "model.language_model." + module})
    if (key == target || key.ends_with("." + target)) return true;
  return false;
}

std::vector<LoraTarget> by_module_path(const std::vector<LoraTarget>& all, std::string pattern,
                                       const std::string& model) {
  const bool preset = pattern.empty();
  if (preset) pattern = kMaxTextGemma4ModulePath;
  const hf::Regex re(pattern, "lora_module_path");
  auto found = [&](const std::string& path) {
    std::vector<std::pair<size_t, size_t>> m;
    re.find(path, m);
    return !m.empty();
  };
  std::vector<LoraTarget> out;
  std::set<std::string> paths;
  for (const LoraTarget& t : all) {
    std::vector<std::string> hit, miss;
    for (const std::string& p : t.maxtext_paths)
      (found(p) ? hit : miss).push_back(p), paths.insert(p);
    if (miss.empty()) out.push_back(t);
    if (!hit.empty() && !miss.empty())
      fail("lora_module_path='", pattern, "' matches ", hit[0], " but not ", miss[0],
           ": the experts' wi_0 and wi_1 are one matrix in Hugging Face's layout "
           "(experts.gate_up_proj), whose adapter PEFT keeps whole; match both or neither");
  }
  if (out.empty())
    fail("lora_module_path='", pattern, "' matches no matrix of ", model,
         preset ? " (MaxText's gemma4 default)" : "",
         "; the nearest of its MaxText paths: ", nearest_names(pattern, paths));
  return out;
}

std::vector<LoraTarget> by_peft_names(const std::vector<LoraTarget>& all, const LoraTargeting& sel,
                                      const std::string& model) {
  const bool all_linear = sel.target_modules.size() == 1 && sel.target_modules[0] == "all-linear";
  std::vector<LoraTarget> out;
  std::map<std::string, int> used;
  std::set<std::string> modules, parameters;
  for (const LoraTarget& t : all) {
    const bool expert = !t.parameter.empty();
    (expert ? parameters : modules).insert(expert ? "experts." + t.parameter : t.module);
    bool take = false;
    if (!expert && all_linear) take = true;
    for (const std::string& name : expert ? sel.target_parameters : sel.target_modules) {
      if (all_linear && !expert) break;
      const bool hit = expert ? peft_name_matches(t.module + "." + t.parameter, name)
                              : peft_name_matches(t.module, name);
      if (hit) used[name]++, take = true;
    }
    if (take) out.push_back(t);
  }
  for (const auto& [key, names] : {std::pair{"lora_target_modules", &sel.target_modules},
                                   std::pair{"lora_target_parameters", &sel.target_parameters}}) {
    for (const std::string& name : *names) {
      if (all_linear || used.count(name)) continue;
      const bool experts_module = name == "experts" || name.ends_with(".experts");
      if (experts_module && names == &sel.target_modules)
        fail("lora_target_modules: '", name,
             "' holds the experts' 3-D weights, not a linear "
             "module; PEFT targets them with target_parameters (lora_target_parameters="
             "experts.gate_up_proj,experts.down_proj)");
      std::set<std::string> leaves;  // the last name of each module (q_proj, proj, ...)
      for (const std::string& m : names == &sel.target_modules ? modules : parameters)
        leaves.insert(names == &sel.target_modules ? m.substr(m.rfind('.') + 1) : m);
      fail(key, ": '", name, "' names no ",
           names == &sel.target_modules ? "linear module" : "expert parameter", " of ", model,
           "; the nearest names: ", nearest_names(name, leaves));
    }
  }
  if (out.empty()) fail("lora_target_modules / lora_target_parameters select no matrix of ", model);
  return out;
}

}  // namespace

AdapterTable::AdapterTable(const ParamTable& base, const LoraTargeting& sel, const LoraShape& shape)
    : base_(&base), shape_(shape), params_(base.config(), {}) {
  if (!sel.module_path.empty() && sel.peft())
    fail(
        "lora_module_path and lora_target_modules/lora_target_parameters both choose the "
        "adapted matrices: set one of them");
  const std::vector<LoraTarget> all = candidates(base);
  targets_ = sel.peft() ? by_peft_names(all, sel, base.config().name)
                        : by_module_path(all, sel.module_path, base.config().name);
  build();
}

AdapterTable::AdapterTable(const ParamTable& base, std::vector<LoraTarget> targets,
                           const LoraShape& shape)
    : base_(&base), targets_(std::move(targets)), shape_(shape), params_(base.config(), {}) {
  build();
}

void AdapterTable::build() {
  const int64_t r = shape_.rank;
  if (r <= 0) fail("lora_rank=", r, ": the adapters' rank must be at least 1");
  if (!(shape_.alpha > 0))
    fail("lora_alpha=", shape_.alpha, ": the adapters' product is scaled by lora_alpha / r, so 0 ",
         "would train adapters that change nothing; PEFT's default is 8, a common choice 2 r");
  if (!(shape_.dropout >= 0 && shape_.dropout < 1))
    fail("lora_dropout=", shape_.dropout, ": expected a probability in [0, 1)");
  std::vector<ParamSpec> specs;
  for (const LoraTarget& t : targets_) {
    // PEFT's ParamWrapper (the experts' adapters) refuses lora_dropout != 0, on loading too.
    if (shape_.dropout > 0 && t.experts > 1)
      fail("lora_dropout=", shape_.dropout, " with an adapter on the experts' ", t.weight,
           ": PEFT has no dropout on expert adapters and refuses to load such an adapter; set "
           "lora_dropout=0, or choose targets without the experts (lora_target_modules, or a "
           "lora_module_path that leaves out MoeBlock_0; MaxText's gemma4 default takes them)");
    if (r > std::min(t.in, t.out))
      fail("lora_rank=", r, " exceeds the smaller side of ", t.weight, " (", t.out, " x ", t.in,
           "): a rank-", r,
           " product of it is no low-rank update; use lora_rank <= ", std::min(t.in, t.out));
    const Shape a = t.experts > 1 ? Shape{t.experts, r, t.in} : Shape{r, t.in};
    const Shape b = t.experts > 1 ? Shape{t.experts, t.out, r} : Shape{t.out, r};
    specs.push_back({t.a_name, a, ParamInit::LoraA, t.layer, 0, false, FsdpRole::SmallVector});
    specs.push_back({t.b_name, b, ParamInit::Zeros, t.layer, 0, false, FsdpRole::SmallVector});
  }
  params_ = ParamTable(base_->config(), specs);
}

LoraPair AdapterTable::pair(const Tensor& flat, const LoraTarget& t,
                            std::optional<DropoutStep> seed) const {
  LoraPair p;
  p.a = params_.view(flat, t.a_name);
  p.b = params_.view(flat, t.b_name);
  p.scale = shape_.scale();
  if (seed && shape_.dropout > 0) {  // never on the experts' (build refuses them)
    p.dropout = shape_.dropout;
    constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
    uint64_t h = seed->seed ^ kGolden;
    for (char ch : t.a_name) h = (h ^ uint8_t(ch)) * 1099511628211ull;
    // The op keeps element i by splitmix64(seed + (i + 1) golden): starting this rank's
    // [tokens, in] input at its first token's global element index is adding to the seed.
    p.dropout_seed = h + uint64_t(seed->first_token) * uint64_t(t.in) * kGolden;
  }
  return p;
}

LayerAdapters AdapterTable::bind_layer(const Tensor& flat, int64_t layer,
                                       std::optional<DropoutStep> seed) const {
  LayerAdapters a;
  for (const LoraTarget& t : targets_) {
    if (t.layer != layer || t.site == LoraSite::ModelProj) continue;
    LoraPair* slot = nullptr;
    switch (t.site) {
      case LoraSite::QProj:
        slot = &a.q_proj;
        break;
      case LoraSite::KProj:
        slot = &a.k_proj;
        break;
      case LoraSite::VProj:
        slot = &a.v_proj;
        break;
      case LoraSite::OProj:
        slot = &a.o_proj;
        break;
      case LoraSite::MlpGate:
        slot = &a.mlp_gate;
        break;
      case LoraSite::MlpUp:
        slot = &a.mlp_up;
        break;
      case LoraSite::MlpDown:
        slot = &a.mlp_down;
        break;
      case LoraSite::RouterProj:
        slot = &a.router_proj;
        break;
      case LoraSite::ExpertsGateUp:
        slot = &a.experts_gate_up;
        break;
      case LoraSite::ExpertsDown:
        slot = &a.experts_down;
        break;
      case LoraSite::PliGate:
        slot = &a.pli_gate;
        break;
      case LoraSite::PliProj:
        slot = &a.pli_proj;
        break;
      case LoraSite::ModelProj:
        break;
    }
    *slot = pair(flat, t, seed);
  }
  return a;
}

LoraPair AdapterTable::bind_model_proj(const Tensor& flat, std::optional<DropoutStep> seed) const {
  for (const LoraTarget& t : targets_)
    if (t.site == LoraSite::ModelProj) return pair(flat, t, seed);
  return {};
}

}  // namespace gemmax

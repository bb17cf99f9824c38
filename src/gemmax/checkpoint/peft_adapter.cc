#include "gemmax/checkpoint/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "gemmax/base/convert.h"
#include "gemmax/base/error.h"
#include "gemmax/io/atomic_file.h"
#include "gemmax/io/safetensors.h"

namespace gemmax {
namespace fs = std::filesystem;

namespace {

constexpr const char* kKeyPrefix = "base_model.model.";

// Whether both of this target's layer has its expert weights adapted (PEFT then nests them).
bool both_experts(const std::vector<LoraTarget>& targets, const LoraTarget& t) {
  int n = 0;
  for (const LoraTarget& u : targets) n += !u.parameter.empty() && u.layer == t.layer;
  return n == 2;
}

// The module whose lora_A/lora_B hold t's adapter, as PEFT names it (without kKeyPrefix).
std::string peft_module(const std::vector<LoraTarget>& targets, const LoraTarget& t,
                        const std::string& prefix) {
  if (t.parameter.empty()) return prefix + t.module;
  // gate_up_proj is declared first: its wrapper is the inner one when both are adapted.
  const bool inner = t.parameter == "gate_up_proj" && both_experts(targets, t);
  return prefix + t.module + (inner ? ".base_layer" : "");
}

// Experts' B between gemmax's [E, out, r] and PEFT's [out, r E] (column j E + e is B_e[:, j]).
Tensor experts_b_to_peft(const Tensor& b) {
  const int64_t E = b.dim(0), out = b.dim(1), r = b.dim(2);
  Tensor p = Tensor::empty({out, r * E}, b.dtype());
  for (int64_t e = 0; e < E; ++e)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t j = 0; j < r; ++j)
        set_from_double(p, o * r * E + j * E + e, get_as_double(b, (e * out + o) * r + j));
  return p;
}
void experts_b_from_peft(const Tensor& p, const Tensor& b) {
  const int64_t E = b.dim(0), out = b.dim(1), r = b.dim(2);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t j = 0; j < r; ++j)
        set_from_double(b, (e * out + o) * r + j, get_as_double(p, o * r * E + j * E + e));
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read '", path, "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("'", path, "' is not JSON: ", e.what());
  }
}

// The options of PEFT's LoraConfig that change what the adapter computes, and that gemmax does
// not have: an adapter using one is refused, never approximated.
void check_supported(const nlohmann::json& c, const std::string& file) {
  auto is_set = [&](const char* key) {
    if (!c.contains(key)) return false;
    const nlohmann::json& v = c[key];
    return !(v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_object() && v.empty()) ||
             (v.is_array() && v.empty()));
  };
  const std::string type = c.value("peft_type", std::string());
  if (type != "LORA")
    fail(file, ": peft_type '", type, "': gemmax reads LoRA adapters (peft_type LORA)");
  for (const char* key : {"use_dora", "lora_bias", "fan_in_fan_out", "use_qalora", "rank_pattern",
                          "alpha_pattern", "modules_to_save", "layer_replication",
                          "trainable_token_indices", "use_bdlora", "megatron_config",
                          "alora_invocation_tokens", "arrow_config", "kasa_config",
                          "monteclora_config"})
    if (is_set(key))
      fail(file, ": '", key, "' is set (", c[key].dump(),
           "): gemmax's LoRA does not have that option, so it cannot compute this adapter");
  if (c.contains("bias") && c["bias"] != "none")
    fail(file, ": bias ", c["bias"].dump(), ": gemmax's adapters have no bias (bias \"none\")");
}

// A module or parameter name without the model's prefix (a multimodal model's language model's,
// or a text model's), as the base's candidates name them.
std::string strip_model_prefix(const std::string& name) {
  for (const char* p : {"model.language_model.", "model."})
    if (name.starts_with(p)) return name.substr(std::string(p).size());
  return name;
}

LoraShape shape_of(const nlohmann::json& c, const std::string& file) {
  LoraShape s;
  if (!c.contains("r") || !c["r"].is_number_integer() || c["r"].get<int64_t>() <= 0)
    fail(file, ": 'r' must be a positive integer (the adapters' rank), got ",
         c.contains("r") ? c["r"].dump() : "nothing");
  s.rank = c["r"].get<int64_t>();
  if (!c.contains("lora_alpha") || !c["lora_alpha"].is_number())
    fail(file, ": 'lora_alpha' must be a number");
  s.alpha = c["lora_alpha"].get<double>();
  if (c.contains("use_rslora") && !c["use_rslora"].is_null() && !c["use_rslora"].is_boolean())
    fail(file, ": 'use_rslora' must be true or false, got ", c["use_rslora"].dump());
  s.rslora = c.contains("use_rslora") && c["use_rslora"].is_boolean() && c["use_rslora"].get<bool>();
  s.dropout = c.contains("lora_dropout") && c["lora_dropout"].is_number()
                  ? c["lora_dropout"].get<double>()
                  : 0.0;
  return s;
}

}  // namespace

bool is_peft_adapter(const std::string& dir) {
  return fs::is_regular_file(fs::path(dir) / kPeftConfigFile);
}

PeftAdapter read_peft_adapter(const std::string& dir, const ParamTable& base, DType dtype) {
  const std::string cfg_file = (fs::path(dir) / kPeftConfigFile).string();
  const std::string st_file = (fs::path(dir) / kPeftWeightsFile).string();
  if (!fs::is_directory(dir)) fail("adapter folder '", dir, "' does not exist");
  if (!fs::exists(cfg_file))
    fail("'", dir, "' holds no ", kPeftConfigFile,
         ": a PEFT adapter folder has adapter_config.json and adapter_model.safetensors");
  PeftAdapter a;
  a.dir = dir;
  a.config = read_json(cfg_file);
  if (!a.config.is_object()) fail(cfg_file, ": expected a JSON object");
  check_supported(a.config, cfg_file);
  a.shape = shape_of(a.config, cfg_file);
  a.base_model = a.config.value("base_model_name_or_path", std::string());
  if (!fs::exists(st_file))
    fail("'", dir, "' has ", kPeftConfigFile, " but no ", kPeftWeightsFile,
         " (gemmax reads the safetensors form PEFT saves by default)");
  const SafetensorsFile st = SafetensorsFile::open(st_file);

  // Which of the base's matrices each tensor adapts.
  const std::vector<LoraTarget> all = AdapterTable::candidates(base);
  std::map<std::string, const LoraTarget*> by_module;  // non-expert targets by module
  for (const LoraTarget& t : all)
    if (t.parameter.empty()) by_module[t.module] = &t;
  // target_parameters, with the model's prefix taken off as it is off the modules below.
  std::vector<std::string> expert_params;
  if (a.config.contains("target_parameters") && a.config["target_parameters"].is_array())
    for (const auto& p : a.config["target_parameters"])
      if (p.is_string()) expert_params.push_back(strip_model_prefix(p.get<std::string>()));
  struct Found {
    const LoraTarget* target;
    std::string a_key, b_key;
  };
  std::map<std::string, Found> found;  // by the target's adapter name
  // Each tensor's module, without PEFT's key prefix, the model's prefix and the factor's suffix.
  std::vector<std::pair<std::string, bool>> modules;  // (module, is lora_A)
  std::set<std::string> seen;
  for (const SafetensorsEntry& e : st.entries()) {
    const std::string& key = e.name;
    const bool is_a = key.ends_with(".lora_A.weight"), is_b = key.ends_with(".lora_B.weight");
    if (!key.starts_with(kKeyPrefix) || (!is_a && !is_b))
      fail(st_file, ": tensor '", key,
           "' is no LoRA factor of PEFT's (base_model.model.<module>."
           "lora_A.weight / lora_B.weight); gemmax reads LoRA adapters only");
    const size_t skip = std::string(kKeyPrefix).size();
    const std::string m =
        strip_model_prefix(key.substr(skip, key.size() - skip - std::string(".lora_A.weight").size()));
    modules.push_back({m, is_a});
    seen.insert(m);
  }
  // A lone expert wrapper whose config does not say which weight it wraps: the one whose input
  // side fits its lora_A (then its lora_B is that weight's too).
  std::map<std::string, std::string> lone_param;
  for (size_t k = 0; k < modules.size(); ++k) {
    const auto& [m, is_a] = modules[k];
    const std::vector<int64_t>& shape = st.entries()[k].shape;
    if (!is_a || !m.ends_with(".experts") || seen.count(m + ".base_layer") || shape.size() != 2)
      continue;
    for (const LoraTarget& c : all)
      if (c.module == m && !c.parameter.empty() && shape[1] == c.in) {
        lone_param[m] = c.parameter;
        break;
      }
  }
  for (size_t k = 0; k < modules.size(); ++k) {
    const SafetensorsEntry& e = st.entries()[k];
    std::string m = modules[k].first;
    const bool is_a = modules[k].second;
    const LoraTarget* t = nullptr;
    const bool inner = m.ends_with(".experts.base_layer");
    if (inner) m = m.substr(0, m.size() - std::string(".base_layer").size());
    if (m.ends_with(".experts")) {
      // Which of the layer's expert weights: the inner wrapper's is gate_up_proj (declared
      // first), the outer one's then down_proj; a lone one's is the parameter the config
      // targets, else the one whose input side fits lora_A.
      std::string param = inner ? "gate_up_proj" : seen.count(m + ".base_layer") ? "down_proj" : "";
      if (param.empty()) {  // PEFT's match of a target parameter: the key or a dotted suffix
        auto targeted = [&](const std::string& key) {
          return std::ranges::any_of(expert_params, [&](const std::string& p) {
            return key == p || key.ends_with("." + p);
          });
        };
        const bool gate_up = targeted(m + ".gate_up_proj"), down = targeted(m + ".down_proj");
        if (gate_up != down) param = gate_up ? "gate_up_proj" : "down_proj";
      }
      if (param.empty() && lone_param.count(m)) param = lone_param[m];
      for (const LoraTarget& c : all)
        if (c.module == m && !c.parameter.empty() && c.parameter == param) {
          t = &c;
          break;
        }
    } else if (auto it = by_module.find(m); it != by_module.end()) {
      t = it->second;
    }
    if (t == nullptr)
      fail(st_file, ": tensor '", e.name, "' adapts no matrix of model '", base.config().name,
           "' (", base.config().num_layers, " layers): an adapter of another model");
    Found& f = found[t->a_name];
    f.target = t;
    (is_a ? f.a_key : f.b_key) = e.name;
  }
  if (found.empty()) fail(st_file, ": no LoRA tensors");
  for (const LoraTarget& t : all) {
    auto it = found.find(t.a_name);
    if (it == found.end()) continue;
    if (it->second.a_key.empty() || it->second.b_key.empty())
      fail(st_file, ": ", t.module, (t.parameter.empty() ? "" : "." + t.parameter), " has lora_",
           it->second.a_key.empty() ? "B" : "A", " but no lora_",
           it->second.a_key.empty() ? "A" : "B");
    a.targets.push_back(t);
  }

  // Shapes against the base and r, then the values in gemmax's layout.
  const AdapterTable table(base, a.targets, a.shape);
  a.weights = Tensor::zeros({table.params().total()}, dtype);
  const int64_t r = a.shape.rank;
  for (const LoraTarget& t : a.targets) {
    const Found& f = found[t.a_name];
    const int64_t E = t.experts;
    for (const auto& [key, want] :
         {std::pair{f.a_key, Shape{E * r, t.in}}, std::pair{f.b_key, Shape{t.out, r * E}}}) {
      const Shape got = st.entry(key).shape;
      if (got != want)
        fail(st_file, ": '", key, "' has shape ", shape_str(got), " but ", t.weight, " of model '",
             base.config().name, "' (", t.out, " x ", t.in,
             E > 1 ? str_cat(", ", E, " experts") : "", ") at r=", r, " needs ", shape_str(want),
             ": an adapter of another model or another rank (", kPeftConfigFile, " says r=", r,
             ")");
    }
    const Tensor av = table.params().view(a.weights, t.a_name);
    const Tensor bv = table.params().view(a.weights, t.b_name);
    convert_into(st.read_as(f.a_key, dtype), av);
    const Tensor b = st.read_as(f.b_key, dtype);
    if (E > 1)
      experts_b_from_peft(b, bv);
    else
      convert_into(b, bv);
  }
  return a;
}

NamedTensors peft_named_tensors(const AdapterTable& adapters, const Tensor& weights,
                                const std::string& prefix, DType dtype) {
  const std::vector<LoraTarget>& targets = adapters.targets();
  NamedTensors tensors;
  for (const LoraTarget& t : targets) {
    const std::string m = kKeyPrefix + peft_module(targets, t, prefix);
    const Tensor a = adapters.params().view(weights, t.a_name);
    const Tensor b = adapters.params().view(weights, t.b_name);
    Tensor a_out = Tensor::empty({a.numel() / t.in, t.in}, dtype);
    convert_into(a, a_out);
    Tensor b_out =
        Tensor::empty(t.experts > 1 ? Shape{t.out, b.numel() / t.out} : b.shape(), dtype);
    convert_into(t.experts > 1 ? experts_b_to_peft(b) : b, b_out);
    tensors.emplace_back(m + ".lora_A.weight", a_out);
    tensors.emplace_back(m + ".lora_B.weight", b_out);
  }
  return tensors;
}

void write_peft_adapter(const std::string& dir, const AdapterTable& adapters, const Tensor& weights,
                        const std::string& base_model, const std::string& prefix) {
  const std::vector<LoraTarget>& targets = adapters.targets();
  const NamedTensors tensors = peft_named_tensors(adapters, weights, prefix);

  // target_modules: the adapted modules' names when every layer that has such a module is
  // adapted (PEFT's list form), else a regex matching exactly the adapted ones (and always for a
  // multimodal model's language model); the experts' parameters likewise.
  std::map<std::string, std::set<std::string>> by_leaf;  // leaf -> adapted modules
  std::vector<std::string> params;                       // in declaration order, as users list them
  std::set<std::string> param_keys;
  for (const LoraTarget& t : targets) {
    if (!t.parameter.empty()) {
      if (std::ranges::find(params, "experts." + t.parameter) == params.end())
        params.push_back("experts." + t.parameter);
      param_keys.insert(t.module + "." + t.parameter);
      continue;
    }
    const size_t dot = t.module.rfind('.');
    // The router's module is `proj`: named with its parent, which no other module ends with.
    std::string leaf = dot == std::string::npos ? t.module : t.module.substr(dot + 1);
    if (leaf == "proj") leaf = "router.proj";
    by_leaf[leaf].insert(t.module);
  }
  std::map<std::string, std::set<std::string>> all_by_leaf;
  std::set<std::string> all_param_keys;
  for (const LoraTarget& t : AdapterTable::candidates(adapters.base())) {
    if (!t.parameter.empty()) {
      if (std::ranges::find(params, "experts." + t.parameter) != params.end())
        all_param_keys.insert(t.module + "." + t.parameter);
      continue;
    }
    const size_t dot = t.module.rfind('.');
    std::string leaf = dot == std::string::npos ? t.module : t.module.substr(dot + 1);
    if (leaf == "proj") leaf = "router.proj";
    if (by_leaf.count(leaf)) all_by_leaf[leaf].insert(t.module);
  }
  nlohmann::json target_modules;
  // A multimodal folder's towers have q_proj, o_proj and MLPs of their own (Gemma4ClippableLinear,
  // which PEFT refuses to adapt): there the names would reach them, so the regex form is written.
  const bool multimodal = prefix.find("language_model.") != std::string::npos;
  if (all_by_leaf == by_leaf && !multimodal) {
    target_modules = nlohmann::json::array();
    for (const auto& [leaf, m] : by_leaf) target_modules.push_back(leaf);
  } else {
    std::string re;
    for (const auto& [leaf, mods] : by_leaf)
      for (const std::string& m : mods) {
        std::string esc;
        for (char ch : m) esc += ch == '.' ? std::string("\\.") : std::string(1, ch);
        re += (re.empty() ? "" : "|") + esc;
      }
    target_modules = "(model\\.)?(language_model\\.)?(" + re + ")";
  }
  nlohmann::json target_parameters = nullptr;
  if (!params.empty()) {
    target_parameters = nlohmann::json::array();
    if (all_param_keys == param_keys)
      for (const std::string& p : params) target_parameters.push_back(p);
    else
      for (const std::string& p : param_keys) target_parameters.push_back(p);
  }
  const LoraShape& s = adapters.shape();
  nlohmann::json c = {{"alora_invocation_tokens", nullptr},
                      {"alpha_pattern", nlohmann::json::object()},
                      {"arrow_config", nullptr},
                      {"auto_mapping", nullptr},
                      {"base_model_name_or_path", base_model},
                      {"bias", "none"},
                      {"corda_config", nullptr},
                      {"ensure_weight_tying", false},
                      {"eva_config", nullptr},
                      {"exclude_modules", nullptr},
                      {"fan_in_fan_out", false},
                      {"inference_mode", true},
                      {"init_lora_weights", true},
                      {"kasa_config", nullptr},
                      {"layer_replication", nullptr},
                      {"layers_pattern", nullptr},
                      {"layers_to_transform", nullptr},
                      {"loftq_config", nlohmann::json::object()},
                      {"lora_bias", false},
                      {"lora_dropout", s.dropout},
                      {"lora_ga_config", nullptr},
                      {"megatron_config", nullptr},
                      {"megatron_core", "megatron.core"},
                      {"modules_to_save", nullptr},
                      {"monteclora_config", nullptr},
                      {"peft_type", "LORA"},
                      {"peft_version", "0.21.2"},
                      {"qalora_group_size", 16},
                      {"r", s.rank},
                      {"rank_pattern", nlohmann::json::object()},
                      {"revision", nullptr},
                      {"target_modules", target_modules},
                      {"target_parameters", target_parameters},
                      {"task_type", "CAUSAL_LM"},
                      {"trainable_token_indices", nullptr},
                      {"use_bdlora", nullptr},
                      {"use_dora", false},
                      {"use_qalora", false},
                      {"use_rslora", s.rslora},
                      {"velora_config", nullptr}};
  // PEFT writes lora_alpha as the user gave it: an integer when it is one.
  if (s.alpha == std::floor(s.alpha) && std::fabs(s.alpha) < 1e15)
    c["lora_alpha"] = int64_t(s.alpha);
  else
    c["lora_alpha"] = s.alpha;
  if (target_modules.is_array() && target_modules.empty()) c["target_modules"] = nullptr;

  fs::create_directories(dir);
  write_safetensors((fs::path(dir) / kPeftWeightsFile).string(), tensors, {{"format", "pt"}});
  write_file_atomic((fs::path(dir) / kPeftConfigFile).string(), c.dump(2) + "\n");
}

void merge_adapters(const AdapterTable& adapters, const Tensor& adapter_weights,
                    const Tensor& base) {
  const ParamTable& base_table = adapters.base();
  const double s = adapters.shape().scale();
  const int64_t r = adapters.shape().rank;
  for (const LoraTarget& t : adapters.targets()) {
    const Tensor a = adapters.params().view(adapter_weights, t.a_name);
    const Tensor b = adapters.params().view(adapter_weights, t.b_name);
    const Tensor w = base_table.view(base, t.weight);
    const int64_t E = t.experts, out = t.out, in = t.in;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
          double d = 0;
          for (int64_t j = 0; j < r; ++j)
            d += get_as_double(b, (e * out + o) * r + j) * get_as_double(a, (e * r + j) * in + i);
          const int64_t at = (e * out + o) * in + i;
          set_from_double(w, at, get_as_double(w, at) + s * d);
        }
  }
}

}  // namespace gemmax

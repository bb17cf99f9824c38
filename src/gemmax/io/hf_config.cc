#include "gemmax/io/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "gemmax/base/error.h"
#include "gemmax/io/atomic_file.h"

namespace gemmax {
namespace {

using json = nlohmann::json;

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kFull = "full_attention";
constexpr const char* kActivation = "gelu_pytorch_tanh";

std::string snippet(const json& j) {
  std::string s = j.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Typed access to one JSON object, with errors that name the file and the key.
struct Keys {
  const json& obj;
  std::string where;  // "'path'" or "'path' text_config"

  const json* find(const std::string& k) const {
    auto it = obj.find(k);
    return it == obj.end() ? nullptr : &*it;
  }
  [[noreturn]] void bad(const std::string& k, const json& v, const char* want) const {
    fail(where, ": key '", k, "' must be ", want, ", got ", snippet(v));
  }
  int64_t to_int(const std::string& k, const json& v) const {
    if (!v.is_number_integer()) bad(k, v, "an integer");
    return v.get<int64_t>();
  }
  int64_t req_int(const std::string& k) const {
    const json* v = find(k);
    if (v == nullptr || v->is_null())
      fail(where, ": missing required key '", k, "'", v ? " (it is null)" : "");
    return to_int(k, *v);
  }
  double num(const std::string& k, double def) const {
    const json* v = find(k);
    if (v == nullptr) return def;
    if (!v->is_number()) bad(k, *v, "a number");
    return v->get<double>();
  }
  bool boolean(const std::string& k, bool def) const {
    const json* v = find(k);
    if (v == nullptr) return def;
    if (!v->is_boolean()) bad(k, *v, "true or false");
    return v->get<bool>();
  }
  std::string str(const std::string& k, const std::string& def) const {
    const json* v = find(k);
    if (v == nullptr) return def;
    if (!v->is_string()) bad(k, *v, "a string");
    return v->get<std::string>();
  }
  [[noreturn]] void unsupported(const std::string& k, const std::string& value,
                                const std::string& why) const {
    fail(where, ": ", k, " = ", value, " is not supported by gemmax: ", why);
  }
};

// The layer kinds of a config.json as gemmax keeps them: the periodic pattern when the list is
// one (global iff l % p == p - 1, the released models'), else the list itself. As transformers'
// Gemma4TextConfig does, the last layer is full attention whatever the list says.
void set_layer_kinds(std::vector<std::string> types, ModelConfig& c) {
  if (!types.empty()) types.back() = kFull;
  const auto first_full = std::find(types.begin(), types.end(), kFull) - types.begin();
  const int64_t p = first_full + 1;
  bool periodic = int64_t(types.size()) % p == 0;
  for (int64_t l = 0; l < int64_t(types.size()) && periodic; ++l)
    periodic = (types[size_t(l)] == kFull) == (l % p == p - 1);
  c.sliding_window_pattern = p;
  c.layer_types.clear();
  if (periodic) return;
  for (size_t l = 0; l < types.size(); ++l) c.layer_types += (l ? "," : "") + types[l];
}

struct Rope {
  double theta = 0;
  double proportion = 1.0;
};

// One entry of rope_parameters, read as transformers' Gemma4TextRotaryEmbedding does:
// "default" rotates every dimension (it ignores partial_rotary_factor), "proportional" rotates
// the first partial_rotary_factor of the frequencies, with exponents over the whole head_dim.
Rope read_rope(const json& j, const std::string& type, const Keys& k) {
  const std::string key = "rope_parameters." + type;
  if (!j.is_object()) fail(k.where, ": ", key, " must be an object, got ", snippet(j));
  for (const auto& [name, v] : j.items())
    if (name != "rope_type" && name != "rope_theta" && name != "partial_rotary_factor" &&
        name != "factor")
      k.unsupported(key + "." + name, snippet(v),
                    "gemmax implements rope_type, rope_theta and partial_rotary_factor only");
  const Keys r{j, k.where};
  Rope out;
  const std::string rtype = r.str("rope_type", "default");
  if (!j.contains("rope_theta")) fail(k.where, ": missing required key '", key, ".rope_theta'");
  out.theta = r.num("rope_theta", 0);
  if (!(out.theta > 0)) fail(k.where, ": ", key, ".rope_theta must be positive, got ", out.theta);
  const double factor = r.num("factor", 1.0);
  if (factor != 1.0)
    k.unsupported(key + ".factor", snippet(j["factor"]), "RoPE scaling is not implemented");
  const double prf = r.num("partial_rotary_factor", 1.0);
  if (rtype == "default") {
    if (prf != 1.0)
      k.unsupported(key + ".partial_rotary_factor", snippet(j["partial_rotary_factor"]),
                    "transformers ignores it with rope_type \"default\" (all dimensions rotate); "
                    "use rope_type \"proportional\" for partial RoPE");
    out.proportion = 1.0;
  } else if (rtype == "proportional") {
    if (prf < 0 || prf > 1)
      fail(k.where, ": ", key, ".partial_rotary_factor must lie in [0, 1], got ", prf);
    out.proportion = prf;
  } else {
    k.unsupported(key + ".rope_type", "\"" + rtype + "\"",
                  "expected \"default\" or \"proportional\"");
  }
  return out;
}

std::string folder_name(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::string name = std::filesystem::absolute(parent.empty() ? "." : parent).filename().string();
  if (name.empty() || name == ".") name = "hf";
  return name;
}

}  // namespace

ModelConfig parse_hf_config(std::string_view text, const std::string& origin, HfConfigInfo* info) {
  json top;
  try {
    top = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(origin, ": not valid JSON: ", e.what());
  }
  if (!top.is_object()) fail(origin, ": a config.json must be a JSON object");
  const Keys tk{top, origin};
  const std::string model_type = tk.str("model_type", "");
  HfConfigInfo inf;
  const json* text_obj = &top;
  std::string where = origin;
  if (model_type == "gemma4") {
    const json* tc = tk.find("text_config");
    if (tc == nullptr || !tc->is_object())
      fail(origin, ": model_type \"gemma4\" needs a \"text_config\" object (the text decoder)");
    text_obj = tc;
    where = origin + " text_config";
    inf.multimodal = true;
    inf.weight_prefix = "model.language_model.";
    // Gemma4Config ties the output head to the embedding through its own flag.
    if (!tk.boolean("tie_word_embeddings", true))
      tk.unsupported("tie_word_embeddings", "false",
                     "gemmax ties the output head to the embedding");
  } else if (model_type == "gemma4_text") {
    inf.weight_prefix = "model.";
  } else if (model_type.empty()) {
    fail(origin, ": missing key 'model_type' (expected \"gemma4_text\" or \"gemma4\")");
  } else {
    fail(origin, ": model_type \"", model_type, "\" is not Gemma 4 (expected \"gemma4_text\" or ",
         "\"gemma4\")");
  }
  const Keys k{*text_obj, where};
  if (inf.multimodal) {
    const std::string inner = k.str("model_type", "gemma4_text");
    if (inner != "gemma4_text")
      fail(where, ": model_type \"", inner, "\" (expected \"gemma4_text\")");
  }
  for (const Keys* src : {&k, &tk}) {  // the decoder's dtype, else the top level's
    const json* d = src->find("dtype");
    if (d == nullptr || d->is_null()) d = src->find("torch_dtype");
    if (d == nullptr || d->is_null()) continue;
    if (!d->is_string()) src->bad("dtype", *d, "a string");
    try {
      inf.dtype = parse_dtype(d->get<std::string>());
    } catch (const Error&) {
      fail(src->where, ": dtype \"", d->get<std::string>(), "\" is not one gemmax reads");
    }
    inf.has_dtype = true;
    break;
  }

  ModelConfig c;
  c.name.clear();  // not model_name's preset: read_hf_config names it after its folder
  c.vocab_size = k.req_int("vocab_size");
  c.d_model = k.req_int("hidden_size");
  c.num_layers = k.req_int("num_hidden_layers");
  c.num_heads = k.req_int("num_attention_heads");
  c.num_kv_heads = k.req_int("num_key_value_heads");
  c.head_dim = k.req_int("head_dim");
  c.mlp_dim = k.req_int("intermediate_size");
  c.sliding_window = k.req_int("sliding_window");
  if (c.num_layers <= 0) fail(where, ": num_hidden_layers must be positive, got ", c.num_layers);

  // Features transformers can build but gemmax does not implement.
  if (k.boolean("enable_moe_block", false)) {
    c.num_experts = k.req_int("num_experts");
    c.num_experts_per_tok = k.req_int("top_k_experts");
    c.moe_mlp_dim = k.req_int("moe_intermediate_size");
    if (c.num_experts < 2)
      fail(where, ": enable_moe_block is true with num_experts ", c.num_experts,
           "; a MoE needs at least 2 experts (enable_moe_block false is the dense layer)");
  } else {  // the dense layer (gemma4-31b): MaxText's num_experts=1; the MoE keys are unread
    c.num_experts = 1;
    c.num_experts_per_tok = 1;
    c.moe_mlp_dim = 0;
  }
  // The small block (gemma4-e2b/e4b), with transformers' defaults: absent is 256 per-layer
  // inputs over 262144 tokens (null or 0: none).
  if (const json* v = k.find("hidden_size_per_layer_input"); v == nullptr)
    c.per_layer_input_dim = 256;
  else if (!v->is_null())
    c.per_layer_input_dim = k.to_int("hidden_size_per_layer_input", *v);
  if (c.per_layer_input_dim > 0) {
    const json* v = k.find("vocab_size_per_layer_input");
    c.per_layer_vocab = v && !v->is_null() ? k.to_int("vocab_size_per_layer_input", *v) : 262144;
  }
  if (const json* v = k.find("num_kv_shared_layers"); v && !v->is_null())
    c.num_kv_shared_layers = k.to_int("num_kv_shared_layers", *v);
  c.double_wide_mlp = k.boolean("use_double_wide_mlp", false);
  if (k.boolean("attention_bias", false))
    k.unsupported("attention_bias", "true", "attention projections have no bias in gemmax");
  if (const double d = k.num("attention_dropout", 0.0); d != 0.0)
    k.unsupported("attention_dropout", snippet((*text_obj)["attention_dropout"]),
                  "dropout is not implemented");
  if (const std::string act = k.str("hidden_activation", kActivation); act != kActivation)
    k.unsupported("hidden_activation", "\"" + act + "\"",
                  "gemmax's GeGLU uses the tanh-approximate GELU (\"gelu_pytorch_tanh\")");
  if (!k.boolean("tie_word_embeddings", true))
    k.unsupported("tie_word_embeddings", "false", "gemmax ties the output head to the embedding");
  if (const json* v = k.find("use_bidirectional_attention"); v && !v->is_null()) {
    if (!v->is_string()) k.bad("use_bidirectional_attention", *v, "null, \"vision\" or \"all\"");
    // "vision" changes the mask around image tokens only; text is causal either way.
    if (v->get<std::string>() != "vision")
      k.unsupported("use_bidirectional_attention", snippet(*v), "gemmax attention is causal");
  }

  // Layer pattern; transformers' default when absent is 5 sliding + 1 full.
  std::vector<std::string> types;
  if (const json* v = k.find("layer_types"); v && !v->is_null()) {
    if (!v->is_array()) k.bad("layer_types", *v, "a list of strings");
    for (size_t l = 0; l < v->size(); ++l) {
      const json& e = (*v)[l];
      if (!e.is_string() || (e.get<std::string>() != kSliding && e.get<std::string>() != kFull))
        fail(where, ": layer_types[", l, "] is ", snippet(e), "; expected \"", kSliding, "\" or \"",
             kFull, "\"");
      types.push_back(e.get<std::string>());
    }
    if (int64_t(types.size()) != c.num_layers)
      fail(where, ": layer_types has ", types.size(), " entries but num_hidden_layers is ",
           c.num_layers);
  } else {
    for (int64_t l = 0; l < c.num_layers; ++l) types.push_back((l + 1) % 6 ? kSliding : kFull);
  }
  set_layer_kinds(std::move(types), c);

  // Global-layer attention shape: flat keys (as released), or per_layer_config (as
  // transformers >= 5.15 saves it: {"05": {"head_dim": 512, "num_key_value_heads": 2}, ...}).
  c.share_kv_projections = k.boolean("attention_k_eq_v", false);
  if (const json* plc = k.find("per_layer_config"); plc && !plc->is_null() && !plc->empty()) {
    if (!plc->is_object()) k.bad("per_layer_config", *plc, "an object");
    std::map<int64_t, std::pair<int64_t, int64_t>> over;  // layer -> (head_dim, kv heads)
    for (const auto& [key, v] : plc->items()) {
      const std::string kk = "per_layer_config." + key;
      int64_t l = -1;
      try {
        size_t used = 0;
        l = std::stoll(key, &used);
        if (used != key.size()) l = -1;
      } catch (...) {
      }
      if (l < 0 || l >= c.num_layers)
        fail(where, ": ", kk, ": '", key, "' is not a layer index below ", c.num_layers);
      if (!v.is_object()) fail(where, ": ", kk, " must be an object, got ", snippet(v));
      for (const auto& [name, x] : v.items())
        if (name != "head_dim" && name != "num_key_value_heads")
          k.unsupported(kk + "." + name, snippet(x),
                        "gemmax varies only head_dim and num_key_value_heads by layer");
      const Keys lk{v, where};
      over[l] = {v.contains("head_dim") ? lk.to_int(kk + ".head_dim", v["head_dim"]) : c.head_dim,
                 v.contains("num_key_value_heads")
                     ? lk.to_int(kk + ".num_key_value_heads", v["num_key_value_heads"])
                     : c.num_kv_heads};
    }
    const std::pair<int64_t, int64_t> base{c.head_dim, c.num_kv_heads};
    std::pair<int64_t, int64_t> global{-1, -1};
    for (int64_t l = 0; l < c.num_layers; ++l) {
      auto it = over.find(l);
      const auto got = it == over.end() ? base : it->second;
      if (c.is_global(l)) {
        if (global.first < 0) global = got;
        if (got != global)
          fail(where, ": per_layer_config gives global layer ", l, " head_dim ", got.first, " and ",
               got.second, " KV heads, unlike the first global layer (", global.first, ", ",
               global.second, "); gemmax needs all global layers alike");
      } else if (got != base) {
        fail(where, ": per_layer_config overrides sliding layer ", l,
             "; gemmax supports overrides on full_attention layers only");
      }
    }
    c.global_head_dim = global.first;
    c.global_num_kv_heads = global.second;
    if (const json* g = k.find("global_head_dim");
        g && !g->is_null() && k.to_int("global_head_dim", *g) != c.global_head_dim)
      fail(where, ": global_head_dim ", snippet(*g), " disagrees with per_layer_config (",
           c.global_head_dim, ")");
  } else {
    c.global_head_dim = k.req_int("global_head_dim");
    // transformers uses num_global_key_value_heads only on K = V layers.
    c.global_num_kv_heads =
        c.share_kv_projections ? k.req_int("num_global_key_value_heads") : c.num_kv_heads;
  }

  // RoPE per layer type; transformers' default when absent.
  json rope = {{kSliding, {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
               {kFull,
                {{"rope_type", "proportional"},
                 {"partial_rotary_factor", 0.25},
                 {"rope_theta", 1000000.0}}}};
  if (const json* v = k.find("rope_parameters"); v && !v->is_null()) {
    if (!v->is_object()) k.bad("rope_parameters", *v, "an object keyed by layer type");
    for (const auto& [name, x] : v->items())
      if (name != kSliding && name != kFull)
        fail(where, ": rope_parameters has key '", name, "'; expected \"", kSliding, "\" and \"",
             kFull, "\" (one entry per layer type)");
    rope = *v;
  }
  bool has_local = false;
  for (int64_t l = 0; l < c.num_layers; ++l) has_local = has_local || !c.is_global(l);
  for (const bool global : {false, true}) {
    const char* type = global ? kFull : kSliding;
    if (!rope.contains(type)) {
      if (!global && !has_local) continue;
      fail(where, ": rope_parameters has no \"", type, "\" entry");
    }
    const Rope r = read_rope(rope[type], type, k);
    if (!global) {
      c.local_rope_theta = r.theta;
      c.local_rope_proportion = r.proportion;
    } else {
      // "default" on full layers sizes the frequencies by head_dim, not global_head_dim.
      if (rope[type].value("rope_type", "default") == "default" && c.global_head_dim != c.head_dim)
        k.unsupported("rope_parameters.full_attention.rope_type", "\"default\"",
                      "transformers sizes it by head_dim, which differs from global_head_dim; "
                      "use \"proportional\"");
      c.global_rope_theta = r.theta;
      c.global_rope_proportion = r.proportion;
    }
  }

  if (const json* v = k.find("final_logit_softcapping"); v && !v->is_null()) {
    if (!v->is_number()) k.bad("final_logit_softcapping", *v, "a number or null");
    c.final_logits_soft_cap = v->get<double>();
    if (!(c.final_logits_soft_cap > 0))  // transformers divides by it whenever it is not null
      fail(where, ": final_logit_softcapping must be positive, or null for no soft-cap; got ",
           snippet(*v));
  } else {
    c.final_logits_soft_cap = 0.0;  // null: no soft-cap
  }
  c.norm_eps = k.num("rms_norm_eps", 1e-6);
  c.initializer_range = k.num("initializer_range", 0.02);
  c.norm_topk_prob = true;  // Gemma4TextRouter always renormalises the top-k weights

  try {
    c.validate();
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  if (info != nullptr) *info = inf;
  return c;
}

ModelConfig read_hf_config(const std::string& path, HfConfigInfo* info) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read Hugging Face config '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  ModelConfig c = parse_hf_config(ss.str(), "'" + path + "'", info);
  c.name = folder_name(path);
  return c;
}

std::string hf_export_refusal(const ModelConfig& c) {
  // Every shape the writer below cannot express, in one place: a run refuses these before it
  // trains, so what trains always exports.
  if (c.num_layers > 0 && !c.is_global(c.num_layers - 1))
    return str_cat("its last layer (", c.num_layers - 1,
                   ") is a sliding layer, which transformers' Gemma 4 cannot hold: it makes the "
                   "last layer full attention whatever config.json says. Give the model a global "
                   "last layer: base_num_decoder_layers a multiple of sliding_window_pattern (",
                   c.sliding_window_pattern, "), or layer_types ending in full_attention");
  if (c.has_moe() && !c.norm_topk_prob)
    return "norm_topk_prob is false, but transformers' Gemma 4 router always renormalises the "
           "top-k expert weights; set norm_topk_prob=true";
  if (!c.share_kv_projections && c.global_num_kv_heads != c.num_kv_heads)
    return str_cat(
        "without K = V (share_kv_projections false) transformers gives the global "
        "layers num_key_value_heads (",
        c.num_kv_heads, ") KV heads, not global_num_kv_heads (", c.global_num_kv_heads,
        "); set global_num_kv_heads=", c.num_kv_heads, " (or 0), or share_kv_projections=true");
  return "";
}

std::string hf_config_json(const ModelConfig& c, DType dtype) {
  c.validate();
  const std::string who = str_cat("write_hf_config (model '", c.name, "'): ");
  if (!is_float(dtype)) fail(who, "weights dtype must be a float type, got ", dtype_name(dtype));
  if (std::string why = hf_export_refusal(c); !why.empty()) fail(who, why);

  using ojson = nlohmann::ordered_json;
  auto rope = [](double theta, double proportion, bool global) {
    ojson r = ojson::object();
    if (global || proportion != 1.0) {
      r["rope_type"] = "proportional";
      r["partial_rotary_factor"] = proportion;
    } else {
      r["rope_type"] = "default";
    }
    r["rope_theta"] = theta;
    return r;
  };
  ojson types = ojson::array();
  for (int64_t l = 0; l < c.num_layers; ++l) types.push_back(c.is_global(l) ? kFull : kSliding);

  ojson j = ojson::object();
  j["architectures"] = {"Gemma4ForCausalLM"};
  j["model_type"] = "gemma4_text";
  j["dtype"] = std::string(dtype_name(dtype));
  j["torch_dtype"] = std::string(dtype_name(dtype));  // the key transformers < 5 and others read
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.d_model;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["global_head_dim"] = c.global_head_dim;
  j["num_global_key_value_heads"] = c.global_num_kv_heads;
  j["attention_k_eq_v"] = c.share_kv_projections;
  j["intermediate_size"] = c.mlp_dim;
  j["enable_moe_block"] = c.has_moe();
  j["num_experts"] = c.has_moe() ? ojson(c.num_experts) : ojson(nullptr);
  j["top_k_experts"] = c.has_moe() ? ojson(c.num_experts_per_tok) : ojson(nullptr);
  j["moe_intermediate_size"] = c.has_moe() ? ojson(c.moe_mlp_dim) : ojson(nullptr);
  j["hidden_activation"] = kActivation;
  j["sliding_window"] = c.sliding_window;
  j["layer_types"] = types;
  j["rope_parameters"] = {{kSliding, rope(c.local_rope_theta, c.local_rope_proportion, false)},
                          {kFull, rope(c.global_rope_theta, c.global_rope_proportion, true)}};
  if (c.final_logits_soft_cap > 0)
    j["final_logit_softcapping"] = c.final_logits_soft_cap;
  else
    j["final_logit_softcapping"] = nullptr;
  j["rms_norm_eps"] = c.norm_eps;
  j["initializer_range"] = c.initializer_range;
  j["tie_word_embeddings"] = true;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["hidden_size_per_layer_input"] = c.per_layer_input_dim;
  j["vocab_size_per_layer_input"] = c.has_per_layer_inputs() ? c.per_layer_vocab : c.vocab_size;
  j["num_kv_shared_layers"] = c.num_kv_shared_layers;
  j["use_double_wide_mlp"] = c.double_wide_mlp;
  j["use_bidirectional_attention"] = nullptr;
  // Not part of the gemmax model; the released Gemma 4 values (docs/MODEL.md §1, §6).
  j["max_position_embeddings"] = 262144;
  j["pad_token_id"] = 0;
  j["eos_token_id"] = 1;
  j["bos_token_id"] = 2;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

void write_hf_config(const ModelConfig& cfg, DType dtype, const std::string& path) {
  write_file_atomic(path, hf_config_json(cfg, dtype));
}

}  // namespace gemmax

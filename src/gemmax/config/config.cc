#include "gemmax/config/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"
#include "gemmax/config/embedded.h"
#include "gemmax/config/key_table.h"
#include "gemmax/config/maxtext_keys.h"

namespace gemmax {
namespace {

const char* type_name(const ConfigValue& v) {
  switch (v.index()) {
    case 0: return "bool";
    case 1: return "int";
    case 2: return "float";
    default: return "string";
  }
}

// YAML 1.1 (MaxText's) allows digit separators: 10_000.
std::string without_digit_separators(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit((unsigned char)s[i - 1]) &&
          std::isdigit((unsigned char)s[i + 1])))
      out += s[i];
  return out;
}

bool parse_int(const std::string& text, int64_t& out) { return parse_yaml_int(text, out); }

bool parse_double(const std::string& text, double& out) {
  if (int64_t i; parse_yaml_int(text, i)) return out = double(i), true;  // 010 is 8.0, as PyYAML
  const std::string s = without_digit_separators(text);
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// YAML 1.1's booleans, as PyYAML (MaxText's reader) resolves them.
bool parse_bool(const std::string& s, bool& out) {
  for (const char* t : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})
    if (s == t) return out = true, true;
  for (const char* f : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})
    if (s == f) return out = false, true;
  return false;
}

// Converts `text` to the type of `like`, or explains what was expected.
ConfigValue convert(const std::string& key, const std::string& text, const ConfigValue& like,
                    const std::string& origin) {
  auto wrong = [&]() -> ConfigValue {
    fail(origin, ": key '", key, "' expects ", type_name(like), " (e.g. ",
         std::visit([](auto&& v) { return str_cat(v); }, like), "), got '", text, "'");
  };
  switch (like.index()) {
    case 0: {
      bool b;
      return parse_bool(text, b) ? ConfigValue(b) : wrong();
    }
    case 1: {
      int64_t i;
      if (parse_int(text, i)) return i;
      // MaxText writes some counts as floats (per_device_batch_size: 12.0).
      double d;
      if (parse_double(text, d) && d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
      return wrong();
    }
    case 2: {
      double d;
      return parse_double(text, d) ? ConfigValue(d) : wrong();
    }
    default:
      // Config values end up in config.yml and state.json, which must be UTF-8.
      if (!is_valid_utf8(text))
        fail(origin, ": key '", key, "': the value is not valid UTF-8 text");
      return text;
  }
}

// Every key at its default (keys.h).
const std::map<std::string, ConfigValue>& base_values() {
  static const std::map<std::string, ConfigValue> base = [] {
    std::map<std::string, ConfigValue> m;
    for (const KeySpec& k : key_specs()) m.emplace(k.key, k.default_value);
    return m;
  }();
  return base;
}

// The documents of a YAML stream, counted by their markers: a document starts with "---" at
// the start of a line or with content outside a document (after "..." or at the top). Done by
// hand because YAML::LoadAll can loop forever on some malformed inputs (found by fuzzing).
int count_yaml_documents(const std::string& text) {
  int docs = 0;
  bool in_doc = false;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto marker = [&](const char* m) {
      return line.rfind(m, 0) == 0 && (line.size() == 3 || line[3] == ' ' || line[3] == '\t');
    };
    if (marker("---")) {
      ++docs;
      in_doc = true;
    } else if (marker("...")) {
      in_doc = false;
    } else if (const size_t c = line.find_first_not_of(" \t");
               c != std::string::npos && line[c] != '#' && !in_doc) {
      ++docs;
      in_doc = true;
    }
  }
  return docs;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read config file '", path, "': no such file or not readable");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_none(const std::string& s) {
  return s == "None" || s == "none" || s == "null" || s == "Null" || s == "NULL" || s == "~";
}

// The preset file a model_name reads: its own, or the one a MaxText name stands for.
std::string preset_file(const std::string& name) {
  const auto& files = embedded_configs();
  if (files.count("models/" + name + ".yml")) return "models/" + name + ".yml";
  for (const MaxTextModel& m : maxtext_models())
    if (m.maxtext_name == name) {
      if (m.preset.empty())
        fail("model_name '", name, "' is not built in gemmax yet: ", m.status,
             " (docs/MAXTEXT.md lists what gemmax trains)");
      return str_cat("models/", m.preset, ".yml");
    }
  return "";
}

YAML::Node parse_mapping(const std::string& text, const std::string& origin) {
  if (const int docs = count_yaml_documents(text); docs > 1)
    fail(origin, ": holds ", docs, " YAML documents (separated by ---); a config is one "
         "document: remove the extra ones");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(origin, ": not valid YAML: ", e.what());
  }
  if (!root.IsNull() && !root.IsMap()) fail(origin, ": expected a mapping of key: value lines");
  // A key given twice: which one the file means cannot be known, even where the values agree.
  std::map<std::string, std::pair<int, std::string>> seen;  // key -> first line, its value
  if (root.IsMap())
    for (const auto& kv : root) {
      const std::string key = kv.first.Scalar(), value = canonical_value(kv.second);
      const int line = kv.first.Mark().line + 1;
      if (const auto [it, fresh] = seen.emplace(key, std::pair(line, value)); !fresh)
        fail(origin, ": key '", key, "' is set twice, to ", it->second.second, " and to ", value,
             " (lines ", it->second.first, " and ", line, "); keep one of them");
    }
  return root;
}

}  // namespace

bool parse_yaml_int(const std::string& text, int64_t& out) {
  std::string_view s = text;
  const bool negative = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  int base = 10;
  if (s.starts_with("0b")) base = 2, s.remove_prefix(2);
  else if (s.starts_with("0x")) base = 16, s.remove_prefix(2);
  else if (s.size() > 1 && s[0] == '0') base = 8, s.remove_prefix(1);
  // Separators may follow the first digit anywhere (10_000, 0x_ff is not a number).
  if (s.empty() || s[0] == '_') return false;
  std::string digits = negative ? "-" : "";
  for (char c : s)
    if (c != '_') digits += c;
  const char* end = digits.data() + digits.size();
  auto [p, ec] = std::from_chars(digits.data(), end, out, base);
  return ec == std::errc() && p == end;
}

Config Config::load(const std::string& file, const std::vector<std::string>& overrides) {
  Config c;
  c.values_ = base_values();
  // A MaxText model file (models/<name>.yml) holds the dimensions of its own model only.
  std::string file_model;
  if (!file.empty()) {
    c.apply_file(file);
    const std::string& name = c.get_string("model_name");
    if (file.ends_with("/" + name + ".yml") || file == name + ".yml") file_model = name;
  }
  for (const std::string& kv : overrides) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      fail("command line: expected key=value, got '", kv, "'");
    c.set(kv.substr(0, eq), kv.substr(eq + 1), "command line");
  }
  if (!file_model.empty() && c.get_string("model_name") != file_model)
    fail("command line: model_name=", c.get_string("model_name"), " contradicts ", file,
         ", the model file of ", file_model, "; give the file of that model, or no model_name");
  c.apply_preset();
  c.check_fixed_keys();
  return c;
}

Config Config::defaults(const std::vector<std::string>& overrides) { return load("", overrides); }

Config Config::from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) fail(origin, ": expected a JSON object of config keys");
  Config c;
  c.values_ = base_values();
  for (const auto& [key, value] : j.items())
    c.set(key, value.is_string() ? value.get<std::string>() : value.dump(), origin);
  c.apply_preset();
  return c;
}

void Config::apply_file(const std::string& path, int depth) {
  const YAML::Node root = parse_mapping(read_text_file(path), path);
  if (root.IsNull()) return;
  // base_config: the file this one overrides, read first. As MaxText: beside this file, else in
  // the configs folder above it (configs/post_train/sft.yml names configs/base.yml).
  if (const YAML::Node base = root["base_config"]) {
    if (!base.IsScalar()) fail(path, ": base_config must be a file name");
    if (depth > 8) fail(path, ": base_config files name each other in a loop");
    namespace fs = std::filesystem;
    const fs::path name = base.Scalar(), dir = fs::path(path).parent_path();
    fs::path found = name.is_absolute() ? name : dir / name;
    std::error_code ec;
    if (!name.is_absolute() && !fs::is_regular_file(found, ec) &&
        fs::is_regular_file(dir.parent_path() / name, ec))
      found = dir.parent_path() / name;
    if (!fs::is_regular_file(found, ec))
      fail(path, ": base_config '", name.string(), "' is not beside it (", (dir / name).string(),
           ") nor in the folder above; MaxText's configs/base.yml is what it names: copy it "
           "there, or remove base_config (gemmax's defaults are MaxText's)");
    apply_file(found.string(), depth + 1);
  }
  // MaxText's base.yml and files made from it are read in MaxText's order: the model file
  // (the preset) overrides them. They are known by keys gemmax does not implement.
  bool maxtext_order = false;
  for (const auto& kv : root) {
    const MaxTextKey* k = find_maxtext_key(kv.first.Scalar());
    if (k && k->cls != KeyClass::Implemented) maxtext_order = true;
  }
  for (const auto& kv : root)
    if (kv.first.Scalar() != "base_config")
      set_value(kv.first.Scalar(), &kv.second, "", path, !maxtext_order);
  // MaxText's models/<name>.yml names no model: the file's name does.
  if (!root["model_name"]) {
    const std::string base = path.substr(path.find_last_of('/') + 1);
    const std::string stem = base.substr(0, base.find_last_of('.'));
    for (const MaxTextModel& m : maxtext_models())
      if (m.maxtext_name == stem) set_value("model_name", nullptr, stem, path, !maxtext_order);
  }
}

void Config::set(const std::string& key, const std::string& text, const std::string& origin) {
  set_value(key, nullptr, text, origin, true);
}

void Config::set_value(const std::string& key_given, const YAML::Node* node,
                       const std::string& text_given, const std::string& origin, bool user) {
  // MaxText's nested blocks (lora: {lora_rank: 16}) and their dotted form (lora.lora_rank=16)
  // are read flat: each leaf key is the key.
  if (node && node->IsMap() && !base_values().count(key_given) && !find_maxtext_key(key_given)) {
    for (const auto& kv : *node) set_value(kv.first.Scalar(), &kv.second, "", origin, user);
    return;
  }
  const std::string key_in = key_given.find('.') == std::string::npos
                                 ? key_given
                                 : key_given.substr(key_given.rfind('.') + 1);
  // A list of names (train_data_columns: ['messages'], lora_target_modules) is kept
  // comma-separated.
  std::string text_in = text_given;
  const bool list_key = key_in == "train_data_columns" || key_in == "eval_data_columns" ||
                        key_in == "lora_target_modules" || key_in == "lora_target_parameters";
  if (list_key && node && node->IsSequence()) {
    text_in.clear();
    for (const auto& item : *node) {
      if (!item.IsScalar()) fail(origin, ": key '", key_in, "' is a list of column names");
      text_in += (text_in.empty() ? "" : ",") + item.Scalar();
    }
    node = nullptr;
  } else if (list_key && !node) {  // the command line's ['a', 'b'], [a,b] or a,b
    std::string t;
    for (char ch : text_in)
      if (ch != '[' && ch != ']' && ch != '\'' && ch != '"' && ch != ' ') t += ch;
    text_in = t;
  }
  const MaxTextKey* mk = find_maxtext_key(key_in);
  if (mk && mk->cls != KeyClass::Implemented) {
    MaxTextSetting& s = maxtext_[key_in];
    s.text = node ? (node->IsScalar() ? node->Scalar() : YAML::Dump(*node)) : text_in;
    s.canonical = node ? canonical_value(*node) : canonical_value(text_in);
    s.origin = origin;
    s.user = user;
    return;
  }
  // fault_injection, a test key of earlier versions, is in the configs their runs saved
  // (config.yml, a checkpoint's state.json) at its empty default: read and dropped, so that those
  // runs resume.
  if (key_in == "fault_injection") {
    const bool empty =
        node ? node->IsNull() || (node->IsScalar() && node->Scalar().empty()) : text_in.empty();
    if (empty) return;
    fail(origin,
         ": fault_injection is no longer a key: the fault tests make a rank fail through "
         "their driver, gemmax_fault_train (docs/FSDP.md#faults)");
  }
  const std::string key = mk && !mk->value.empty() ? std::string(mk->value) : key_in;
  auto it = values_.find(key);
  if (it == values_.end()) {
    const std::string near = nearest_key(key_in);
    fail(origin, ": unknown config key '", key_in, "'",
         near.empty() ? std::string("; gemmax's keys are in configs/base.yml, MaxText's in docs/MAXTEXT.md")
                      : "; did you mean '" + near + "'?");
  }
  const KeySpec* spec = find_key_spec(key);
  const std::string_view none_means = spec ? spec->maxtext.none_means : std::string_view();
  std::string text = text_in;
  if (node) {
    if (!node->IsScalar() && !node->IsNull())
      fail(origin, ": key '", key_in, "' takes a single ", type_name(it->second),
           " value, not a ", node->IsSequence() ? "list" : "mapping", " (got ",
           canonical_value(*node), ")");
    if (node->IsNull() && none_means.empty())
      fail(origin, ": key '", key_in, "' has no value; it takes a ", type_name(it->second),
           " (e.g. ", std::visit([](auto&& v) { return str_cat(v); }, it->second), ")");
    text = node->IsNull() ? "None" : node->Scalar();
  }
  if (!none_means.empty() && is_none(text)) text = std::string(none_means);
  it->second = convert(key_in, text, it->second, origin);
  user_keys_[key] = user;
}

bool Config::set_by_user(const std::string& key) const {
  if (auto it = user_keys_.find(key); it != user_keys_.end() && it->second) return true;
  auto m = maxtext_.find(key);
  return m != maxtext_.end() && m->second.user;
}

void Config::apply_preset() {
  const std::string& name = get_string("model_name");
  std::string known;
  for (const auto& p : preset_names()) known += (known.empty() ? "" : ", ") + p;
  for (const MaxTextModel& m : maxtext_models()) known += str_cat(", ", m.maxtext_name);
  if (name == "default")
    fail("model_name 'default' is MaxText's base model (a llama2 block), not a Gemma-4 model: set "
         "model_name to one of ", known);
  const std::string path = preset_file(name);
  if (path.empty()) fail("unknown model_name '", name, "': presets are ", known);
  const YAML::Node root = YAML::Load(embedded_configs().at(path));
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    if (set_by_user(key)) continue;
    set_value(key, &kv.second, "", "configs/" + path, false);
  }
}

void Config::check_fixed_keys() const {
  // decoder_block first: a model file of another block fails on it with the clearest message.
  if (const std::string b = get_string("decoder_block"); b != "gemma4" && b != "gemma4_small")
    fail("key 'decoder_block' is \"", b, "\", but gemmax builds only \"gemma4\" (gemma4-26b, "
         "gemma4-31b) and \"gemma4_small\" (gemma4-e2b, gemma4-e4b) (docs/MAXTEXT.md)");
  std::vector<const MaxTextKey*> order;
  if (const MaxTextKey* b = find_maxtext_key("decoder_block")) order.push_back(b);
  for (const MaxTextKey& k : maxtext_keys())
    if (k.cls == KeyClass::Fixed && k.key != "decoder_block") order.push_back(&k);
  for (const MaxTextKey* k : order) {
    auto it = maxtext_.find(std::string(k->key));
    if (it == maxtext_.end()) continue;
    const MaxTextSetting& s = it->second;
    if (s.canonical == canonical_value(std::string(k->value))) continue;
    // The dense model (num_experts=1) has no MoE layer for shared_experts to describe.
    if (k->key == "shared_experts" && get_int("num_experts") == 1) continue;
    fail(s.origin, ": key '", k->key, "' is ", s.text, ", but gemmax has only ", k->key, "=",
         k->value, (k->note.empty() ? std::string() : str_cat(" (", k->note, ")")),
         "; remove the key or set it to ", k->value, " (docs/MAXTEXT.md)");
  }
}

std::vector<std::string> Config::ignored_maxtext_keys() const {
  std::vector<std::string> keys;
  for (const auto& [key, s] : maxtext_)
    if (find_maxtext_key(key)->cls == KeyClass::NoMeaning) keys.push_back(key);
  return keys;
}

std::string Config::ignored_keys_line() const {
  const std::vector<std::string> keys = ignored_maxtext_keys();
  if (keys.empty()) return "";
  std::string line = str_cat("MaxText keys with no meaning in gemmax, ignored (", keys.size(), "):");
  for (const std::string& k : keys) line += " " + k;
  return line;
}

const ConfigValue& Config::at(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) fail("unknown config key '", key, "'");
  return it->second;
}

bool Config::get_bool(const std::string& key) const {
  const ConfigValue& v = at(key);
  if (auto p = std::get_if<bool>(&v)) return *p;
  fail("config key '", key, "' is a ", type_name(v), ", read as bool");
}

int64_t Config::get_int(const std::string& key) const {
  const ConfigValue& v = at(key);
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  fail("config key '", key, "' is a ", type_name(v), ", read as int");
}

double Config::get_double(const std::string& key) const {
  const ConfigValue& v = at(key);
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return double(*p);
  fail("config key '", key, "' is a ", type_name(v), ", read as float");
}

const std::string& Config::get_string(const std::string& key) const {
  const ConfigValue& v = at(key);
  if (auto p = std::get_if<std::string>(&v)) return *p;
  fail("config key '", key, "' is a ", type_name(v), ", read as string");
}

std::vector<std::string> Config::keys() const {
  std::vector<std::string> k;
  for (const auto& kv : values_) k.push_back(kv.first);
  return k;
}

std::string Config::value_text(const std::string& key) const {
  return std::visit(
      [](auto&& v) -> std::string {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>) return v ? "true" : "false";
        else if constexpr (std::is_same_v<V, double>) {
          std::ostringstream os;
          os.precision(17);
          os << v;
          return os.str();
        } else return str_cat(v);
      },
      at(key));
}

nlohmann::json Config::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  // (No structured binding: clang before 16 cannot capture one in the lambda.)
  for (const auto& kv : values_) std::visit([&](auto&& x) { j[kv.first] = x; }, kv.second);
  return j;
}

std::string Config::to_yaml() const {
  std::string out = "# The resolved configuration of this run (gemmax train FILE repeats it).\n";
  for (const auto& [key, value] : values_) {
    const std::string text = value_text(key);
    out += key + ": " + (std::holds_alternative<std::string>(value) ? nlohmann::json(text).dump() : text) + "\n";
  }
  return out;
}

std::string Config::nearest_key(const std::string& key) {
  std::vector<std::string> keys;
  for (const auto& kv : base_values()) keys.push_back(kv.first);
  for (const MaxTextKey& k : maxtext_keys()) keys.emplace_back(k.key);
  const std::string best = nearest(key, keys);
  // Only a near spelling helps; a distant key only misleads.
  const size_t allowed = std::max<size_t>(2, key.size() / 5);
  return !best.empty() && edit_distance(key, best) <= allowed ? best : "";
}

std::vector<std::string> Config::preset_names() {
  std::vector<std::string> names;
  for (const auto& kv : embedded_configs()) {
    const std::string& path = kv.first;
    if (path.rfind("models/", 0) == 0) names.push_back(path.substr(7, path.size() - 7 - 4));
  }
  return names;
}

}  // namespace gemmax

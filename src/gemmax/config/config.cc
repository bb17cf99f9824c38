#include "gemmax/config/config.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"
#include "gemmax/config/embedded.h"

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

bool parse_int(const std::string& s, int64_t& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end && !s.empty();
}

bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

bool parse_bool(const std::string& s, bool& out) {
  if (s == "true" || s == "True" || s == "TRUE") return out = true, true;
  if (s == "false" || s == "False" || s == "FALSE") return out = false, true;
  return false;
}

// The value a YAML scalar denotes when no type is imposed (base.yml declares types this way).
ConfigValue infer(const YAML::Node& node) {
  const std::string s = node.Scalar();
  if (node.Tag() == "!") return s;  // quoted
  bool b;
  int64_t i;
  double d;
  if (parse_bool(s, b)) return b;
  if (parse_int(s, i)) return i;
  if (parse_double(s, d)) return d;
  return s;
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
      return parse_int(text, i) ? ConfigValue(i) : wrong();
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

const std::map<std::string, ConfigValue>& base_values() {
  static const std::map<std::string, ConfigValue> base = [] {
    std::map<std::string, ConfigValue> m;
    const YAML::Node root = YAML::Load(embedded_configs().at("base.yml"));
    for (const auto& kv : root) m[kv.first.Scalar()] = infer(kv.second);
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

}  // namespace

Config Config::load(const std::string& file, const std::vector<std::string>& overrides) {
  Config c;
  c.values_ = base_values();
  if (!file.empty()) c.apply_yaml(read_text_file(file), file, true);
  for (const std::string& kv : overrides) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      fail("command line: expected key=value, got '", kv, "'");
    c.set(kv.substr(0, eq), kv.substr(eq + 1), "command line");
  }
  c.apply_preset();
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

void Config::apply_yaml(const std::string& text, const std::string& origin, bool user) {
  if (const int docs = count_yaml_documents(text); docs > 1)
    fail(origin, ": holds ", docs, " YAML documents (separated by ---); a config is one "
         "document: remove the extra ones");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(origin, ": not valid YAML: ", e.what());
  }
  if (root.IsNull()) return;
  if (!root.IsMap()) fail(origin, ": expected a mapping of key: value lines");
  std::map<std::string, int> lines;  // key -> 1-based line of its first occurrence
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    const int line = kv.first.Mark().line + 1;
    if (const auto [it, fresh] = lines.emplace(key, line); !fresh)
      fail(origin, ": key '", key, "' is set twice (lines ", it->second, " and ", line,
           "); keep one");
    if (!kv.second.IsScalar())
      fail(origin, ": key '", key, "' must have a single value, not a list or mapping");
    if (user) {
      set(key, kv.second.Scalar(), origin);
    } else {
      values_[key] = convert(key, kv.second.Scalar(), at(key), origin);
    }
  }
}

void Config::set(const std::string& key, const std::string& text, const std::string& origin) {
  auto it = values_.find(key);
  if (it == values_.end())
    fail(origin, ": unknown config key '", key, "'; did you mean '", nearest_key(key), "'?");
  it->second = convert(key, text, it->second, origin);
  user_keys_[key] = true;
}

void Config::apply_preset() {
  const std::string& name = get_string("model_name");
  const auto& files = embedded_configs();
  auto it = files.find("models/" + name + ".yml");
  if (it == files.end()) {
    std::string known;
    for (const auto& p : preset_names()) known += (known.empty() ? "" : ", ") + p;
    fail("unknown model_name '", name, "': presets are ", known);
  }
  const YAML::Node root = YAML::Load(it->second);
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    if (set_by_user(key)) continue;
    values_[key] = convert(key, kv.second.Scalar(), at(key), "configs/models/" + name + ".yml");
  }
}

const ConfigValue& Config::at(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end())
    fail("unknown config key '", key, "'; did you mean '", nearest_key(key), "'?");
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
  return nearest(key, keys);
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

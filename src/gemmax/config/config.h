// The run configuration: a typed key -> value map built MaxText's way.
//
// configs/base.yml (compiled in) declares every key; the type of a key is the type of its
// default there. A run's values come from, in order: base.yml, the user's YAML file, the
// key=value overrides, and finally the model preset named by `model_name`, which fills every
// key that the user did not set.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace gemmax {

using ConfigValue = std::variant<bool, int64_t, double, std::string>;

class Config {
 public:
  // `file` may be empty. Throws gemmax::Error for an unknown key (naming the nearest valid
  // one), a value of the wrong type, an unknown preset, or an unreadable file.
  static Config load(const std::string& file, const std::vector<std::string>& overrides);
  // base.yml and the preset only: what tests and tools start from.
  static Config defaults(const std::vector<std::string>& overrides = {});
  // A resolved config saved by to_json() (checkpoints, run folders); `origin` names it in errors.
  static Config from_json(const nlohmann::json& j, const std::string& origin);

  bool get_bool(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;  // accepts integer values too
  const std::string& get_string(const std::string& key) const;

  // Sets a key from its text form, checking the name and the type. `origin` names where the
  // value came from, for error messages ("command line", "run.yml", ...).
  void set(const std::string& key, const std::string& text, const std::string& origin);
  bool set_by_user(const std::string& key) const { return user_keys_.count(key) > 0; }
  bool has(const std::string& key) const { return values_.count(key) > 0; }

  std::vector<std::string> keys() const;
  nlohmann::json to_json() const;
  // Every key as a YAML file that `gemmax train FILE` reads back to the same config.
  std::string to_yaml() const;
  std::string value_text(const std::string& key) const;

  // The key of base.yml closest to `key` by edit distance.
  static std::string nearest_key(const std::string& key);
  static std::vector<std::string> preset_names();

 private:
  const ConfigValue& at(const std::string& key) const;
  void apply_yaml(const std::string& text, const std::string& origin, bool user);
  void apply_preset();

  std::map<std::string, ConfigValue> values_;
  std::map<std::string, bool> user_keys_;
};

}  // namespace gemmax

// The run configuration: a typed key -> value map built MaxText's way.
//
// The key table (keys.h) declares every key with its type and default. A run's values come
// from, in order: those defaults, the user's YAML file, the key=value overrides, and finally the
// model preset named by `model_name`, which fills every key that the user did not set. MaxText's keys that gemmax does not implement are read as the
// table of maxtext_keys.h says; a file holding such keys (MaxText's base.yml) is read in
// MaxText's order instead: the preset overrides the file, the command line overrides both.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace YAML {
class Node;
}

namespace gemmax {

using ConfigValue = std::variant<bool, int64_t, double, std::string>;

// An integer as YAML 1.1 writes it and PyYAML (MaxText's reader) resolves it: decimal, 0b
// binary, 0x hexadecimal, a leading 0 for octal (010 is 8), with _ separators (10_000).
bool parse_yaml_int(const std::string& text, int64_t& out);

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
  bool set_by_user(const std::string& key) const;
  bool has(const std::string& key) const { return values_.count(key) > 0; }

  std::vector<std::string> keys() const;
  nlohmann::json to_json() const;
  // Every key as a YAML file that `gemmax train FILE` reads back to the same config.
  std::string to_yaml() const;
  std::string value_text(const std::string& key) const;

  // MaxText keys with no meaning in gemmax that this run set (ignored), and the one line that
  // names them at the start of a run ("" when there are none).
  std::vector<std::string> ignored_maxtext_keys() const;
  std::string ignored_keys_line() const;

  // The key of base.yml or of MaxText nearest to `key` in spelling; "" if none is near.
  static std::string nearest_key(const std::string& key);
  static std::vector<std::string> preset_names();

 private:
  // A MaxText key gemmax does not implement, as set by a file, the command line or a preset.
  struct MaxTextSetting {
    std::string text, canonical, origin;
    bool user = false;
  };

  const ConfigValue& at(const std::string& key) const;
  void apply_file(const std::string& path, int depth = 0);  // depth: base_config files above
  void apply_preset();
  // `node` is a YAML node (files, presets) or null with `text` the value (command line).
  void set_value(const std::string& key, const YAML::Node* node, const std::string& text,
                 const std::string& origin, bool user);
  void check_fixed_keys() const;

  std::map<std::string, ConfigValue> values_;
  std::map<std::string, bool> user_keys_;
  std::map<std::string, MaxTextSetting> maxtext_;
};

}  // namespace gemmax

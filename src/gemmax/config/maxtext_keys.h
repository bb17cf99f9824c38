// MaxText's configuration keys that gemmax does not read as its own (keys.h declares those): the
// table that decides how such a key in a MaxText config file or command line is read. With
// keys.h it is what docs/MAXTEXT.md is generated from (scripts/config_docs.py).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace YAML {
class Node;
}

namespace gemmax {

enum class KeyClass {
  Implemented,  // read with MaxText's meaning as a gemmax key of another name
  Fixed,        // accepted only at the value that is what gemmax does
  NoMeaning,    // accepted and ignored (TPU, XLA, cloud, profiler, multimodal, ...)
};

struct MaxTextKey {
  std::string_view key;
  KeyClass cls;
  // Implemented: the gemmax key it sets. Fixed: the one accepted value, in YAML form.
  // NoMeaning: unused.
  std::string_view value = {};
  // Fixed: what gemmax does (for errors and the doc). NoMeaning: why it has no meaning here.
  std::string_view note = {};
};

std::span<const MaxTextKey> maxtext_keys();

// MaxText's Gemma-4 model_name values and the gemmax preset (configs/models/) each one reads.
struct MaxTextModel {
  std::string_view maxtext_name;
  std::string_view preset;  // "" for a model gemmax does not build yet
  std::string_view status;  // what gemmax trains of it
};
std::span<const MaxTextModel> maxtext_models();
// nullptr when `key` is not a MaxText key.
const MaxTextKey* find_maxtext_key(std::string_view key);

// A YAML value in a canonical text form, so that values MaxText reads as equal compare equal:
// true / True, 1e-6 / 1.0e-6 / 0.000001, 10_000 / 10000, -1 / -1.0, None / null / ~, and lists
// and mappings item by item. `yaml_text` is a YAML scalar or a flow list / mapping.
std::string canonical_value(const std::string& yaml_text);
std::string canonical_value(const YAML::Node& node);

}  // namespace gemmax

// The keys of keys.h as a table to iterate: what parsing, range checks, the generated
// configs/base.yml and docs/MAXTEXT.md, and `gemmax info --keys` read.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gemmax/config/config.h"

namespace gemmax {

// The numbers a key's value must lie in (keys.h: any, closed, half_open, open_closed, open,
// either).
struct KeyRange {
  bool checked = false;
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
  bool has_or_value = false;  // or_value is valid too (-1: "the default")
  double or_value = 0;
  std::string text(bool integer) const;  // "[0, 1)", "-1 or [1, 9223372036854775807]"
  bool contains(double v) const;
};

// How a gemmax key relates to MaxText's configuration.
struct KeyMaxText {
  bool is_maxtext = false;       // MaxText has the key, with this meaning
  std::string_view none_means;   // the value MaxText's None stands for ("": None is refused)
};

struct KeySpec {
  std::string_view part, key, help;
  std::string_view type;  // bool | int | float | string
  ConfigValue default_value;
  std::vector<std::string_view> choices;  // the names an enum key takes (else empty)
  KeyRange range;
  KeyMaxText maxtext;
};

// Every key, part by part, in the order of keys.h.
const std::vector<KeySpec>& key_specs();
// nullptr when `key` is no key of gemmax's.
const KeySpec* find_key_spec(std::string_view key);

// The table as JSON: the keys, MaxText's keys and models (what scripts/config_docs.py renders).
std::string key_table_json();

}  // namespace gemmax

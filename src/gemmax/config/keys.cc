#include "gemmax/config/key_table.h"

#include <cmath>
#include <cstdint>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "gemmax/base/strings.h"
#include "gemmax/config/key_value.h"
#include "gemmax/config/maxtext_keys.h"
#include "gemmax/config/train_config.h"

namespace gemmax {
namespace {

constexpr double kInf = INFINITY;
constexpr int64_t kI64 = INT64_MAX, kI32 = INT32_MAX;

// The range and MaxText markers keys.h writes.
constexpr KeyRange any() { return {}; }
constexpr KeyRange closed(double lo, double hi) { return {true, lo, hi, false, false}; }
constexpr KeyRange half_open(double lo, double hi) { return {true, lo, hi, false, true}; }
constexpr KeyRange open_closed(double lo, double hi) { return {true, lo, hi, true, false}; }
constexpr KeyRange open(double lo, double hi) { return {true, lo, hi, true, true}; }
constexpr KeyRange either(double v, KeyRange r) {
  r.has_or_value = true;
  r.or_value = v;
  return r;
}
constexpr KeyMaxText maxtext() { return {true, ""}; }
constexpr KeyMaxText own() { return {false, ""}; }
constexpr KeyMaxText maxtext_none_is(std::string_view v) { return {true, v}; }

std::vector<KeySpec> make_specs() {
  std::vector<KeySpec> specs;
  std::string_view part;
#define GEMMAX_SPEC(Type, field, key, default_value, range, mx, help)                     \
  specs.push_back(KeySpec{part, #key, help, key_value::type_name<Type>(),                 \
                          key_value::stored<Type>(Type(default_value)),                   \
                          key_value::choices<Type>(), range, mx});
#define GEMMAX_SPEC_PART(p, Struct, KEYS) \
  part = #p;                              \
  KEYS(GEMMAX_SPEC)
  GEMMAX_KEY_PARTS(GEMMAX_SPEC_PART)
#undef GEMMAX_SPEC_PART
#undef GEMMAX_SPEC
  return specs;
}

// A bound as an error message writes it: integers whole (INT64_MAX exactly), floats as %g.
std::string bound(double v, bool integer) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (integer) return v >= 9.2e18 ? str_cat(INT64_MAX) : str_cat(int64_t(v));
  return str_cat(v);
}

}  // namespace

std::string KeyRange::text(bool integer) const {
  const std::string r = str_cat(lo_open ? "(" : "[", bound(lo, integer), ", ", bound(hi, integer),
                                hi_open ? ")" : "]");
  return has_or_value ? str_cat(bound(or_value, integer), " or ", r) : r;
}

bool KeyRange::contains(double v) const {
  if (!checked || (has_or_value && v == or_value)) return true;
  return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

const std::vector<KeySpec>& key_specs() {
  static const std::vector<KeySpec> specs = make_specs();
  return specs;
}

const KeySpec* find_key_spec(std::string_view key) {
  static const auto index = [] {
    std::unordered_map<std::string_view, const KeySpec*> m;
    for (const KeySpec& k : key_specs()) m.emplace(k.key, &k);
    return m;
  }();
  const auto it = index.find(key);
  return it == index.end() ? nullptr : it->second;
}

std::string key_table_json() {
  using nlohmann::json;
  json keys = json::array();
  for (const KeySpec& k : key_specs()) {
    json j = {{"part", k.part}, {"key", k.key}, {"type", k.type}, {"help", k.help},
              {"maxtext", k.maxtext.is_maxtext}};
    std::visit([&](auto&& v) { j["default"] = v; }, k.default_value);
    if (!k.choices.empty()) j["choices"] = k.choices;
    if (k.range.checked) j["range"] = k.range.text(k.type == "int");
    if (!k.maxtext.none_means.empty()) j["none_means"] = k.maxtext.none_means;
    keys.push_back(j);
  }
  json maxtext = json::array();
  for (const MaxTextKey& k : maxtext_keys()) {
    const char* cls = k.cls == KeyClass::Implemented ? "alias"
                      : k.cls == KeyClass::Fixed     ? "fixed"
                                                     : "no_meaning";
    json j = {{"key", k.key}, {"class", cls}, {"value", k.value}, {"note", k.note}};
    maxtext.push_back(j);
  }
  json models = json::array();
  for (const MaxTextModel& m : maxtext_models())
    models.push_back({{"maxtext_name", m.maxtext_name}, {"preset", m.preset}, {"status", m.status}});
  return json{{"keys", keys}, {"maxtext_keys", maxtext}, {"maxtext_models", models}}.dump(1);
}

}  // namespace gemmax

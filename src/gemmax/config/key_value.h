// How a key of each type (keys.h) is stored in a Config and read back into its field.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gemmax/base/dtype.h"
#include "gemmax/base/error.h"
#include "gemmax/base/value_names.h"
#include "gemmax/config/config.h"

namespace gemmax::key_value {

// The dtypes a dtype key takes (others, such as float16, are source formats of checkpoints).
inline constexpr std::string_view kDTypes[] = {"bfloat16", "float32", "float64"};

template <class T>
constexpr std::string_view type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_integral_v<T>) return "int";
  else if constexpr (std::is_floating_point_v<T>) return "float";
  else return "string";  // text, and the names of enums and dtypes
}

template <class T>
ConfigValue stored(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v;
  else if constexpr (std::is_integral_v<T>) return int64_t(v);
  else if constexpr (std::is_floating_point_v<T>) return double(v);
  else if constexpr (std::is_same_v<T, std::string>) return v;
  else if constexpr (std::is_same_v<T, DType>) return std::string(dtype_name(v));
  else return std::string(name_of(v));
}

template <class T>
std::vector<std::string_view> choices() {
  std::vector<std::string_view> out;
  if constexpr (std::is_same_v<T, DType>) out.assign(std::begin(kDTypes), std::end(kDTypes));
  else if constexpr (NamedEnum<T>)
    for (const NamedValue<T>& n : value_names(T{})) out.push_back(n.name);
  return out;
}

// The field's value of `key` in `c`; an enum's unknown name is an error naming the key, the
// value, the names it takes and the key's help.
template <class T>
T read(const Config& c, const char* key, std::string_view help) {
  if constexpr (std::is_same_v<T, bool>) return c.get_bool(key);
  else if constexpr (std::is_integral_v<T>) return c.get_int(key);
  else if constexpr (std::is_floating_point_v<T>) return c.get_double(key);
  else if constexpr (std::is_same_v<T, std::string>) return c.get_string(key);
  else if constexpr (std::is_same_v<T, DType>) {
    const std::string& name = c.get_string(key);
    try {
      return parse_dtype(name);  // names and their aliases (bf16, fp32, ...)
    } catch (const Error&) {
      fail(key, "='", name, "': expected bfloat16, float32 or float64 (", help, ")");
    }
  } else {
    const std::string& name = c.get_string(key);
    if (const std::optional<T> v = value_named<T>(name)) return *v;
    fail(key, "='", name, "': expected ", name_choices<T>(), " (", help, ")");
  }
}

}  // namespace gemmax::key_value

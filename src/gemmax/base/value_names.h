// The names of a closed set of values: an enum that a config key or a command-line flag takes.
// Each such enum declares its names once, beside itself:
//
//   enum class CudaGmm { Mma, Sm90 };
//   GEMMAX_VALUE_NAMES(CudaGmm, {CudaGmm::Mma, "mma"}, {CudaGmm::Sm90, "sm90"})
//
// and parsing, printing, error messages and generated docs read them from there.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "gemmax/base/error.h"

namespace gemmax {

template <class E>
struct NamedValue {
  E value;
  std::string_view name;
};

// Declares `value_names(E)`, found by argument-dependent lookup from the templates below.
#define GEMMAX_VALUE_NAMES(E, ...)                                                   \
  inline constexpr NamedValue<E> E##_value_names_[] = {__VA_ARGS__};                \
  constexpr std::span<const NamedValue<E>> value_names(E) { return E##_value_names_; }

template <class E>
concept NamedEnum = requires(E e) { value_names(e); };

template <NamedEnum E>
constexpr std::string_view name_of(E e) {
  for (const NamedValue<E>& n : value_names(E{}))
    if (n.value == e) return n.name;
  return "?";
}

template <NamedEnum E>
constexpr std::optional<E> value_named(std::string_view name) {
  for (const NamedValue<E>& n : value_names(E{}))
    if (n.name == name) return n.value;
  return std::nullopt;
}

// "a or b", "a, b or c": the names as an error message lists them.
template <NamedEnum E>
std::string name_choices() {
  const auto names = value_names(E{});
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += str_cat(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ", names[i].name);
  return out;
}

// The value named `name`; else an error naming `what` (a key or a flag), the name and the choices.
template <NamedEnum E>
E parse_named(std::string_view what, std::string_view name) {
  if (const std::optional<E> v = value_named<E>(name)) return *v;
  fail(what, "='", name, "': expected ", name_choices<E>());
}

}  // namespace gemmax

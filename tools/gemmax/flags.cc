#include "flags.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"

namespace gemmax {

Flags::Flags(const char* command, int argc, char** argv, const std::vector<FlagSpec>& specs,
             bool allow_positional)
    : command_(command) {
  auto find = [&](const std::string& name) -> const FlagSpec* {
    for (const FlagSpec& s : specs)
      if (name == s.name) return &s;
    return nullptr;
  };
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      if (!allow_positional)
        fail("gemmax ", command_, ": unexpected argument '", arg, "' (see --help)");
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) value = name.substr(eq + 1), name = name.substr(0, eq);
    const FlagSpec* spec = find(name);
    if (!spec) {
      std::vector<std::string> names;
      for (const FlagSpec& s : specs) names.push_back(s.name);
      const std::string close = nearest(name, names);
      fail("gemmax ", command_, ": unknown flag --", name,
           close.empty() ? std::string() : "; did you mean --" + close + "?");
    }
    if (spec->takes_value && !inline_value) {
      if (i + 1 >= argc) fail("gemmax ", command_, ": --", name, " needs a value");
      value = argv[++i];
    }
    if (!spec->takes_value && inline_value)
      fail("gemmax ", command_, ": --", name, " takes no value");
    values_[name] = value;
  }
}

const std::string& Flags::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) fail("gemmax ", command_, ": missing --", name, " (see --help)");
  return it->second;
}

std::string Flags::get(const std::string& name, const std::string& fallback) const {
  return has(name) ? get(name) : fallback;
}

int64_t Flags::get_int(const std::string& name) const {
  const std::string& v = get(name);
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size())
    fail("gemmax ", command_, ": --", name, " expects an integer, got '", v, "'");
  return out;
}

int64_t Flags::get_int(const std::string& name, int64_t fallback) const {
  return has(name) ? get_int(name) : fallback;
}

double Flags::get_double(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string& v = get(name);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size())
    fail("gemmax ", command_, ": --", name, " expects a number, got '", v, "'");
  return d;
}

}  // namespace gemmax

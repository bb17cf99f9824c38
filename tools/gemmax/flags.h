// Command-line flags of the subcommands: `--name value` or `--name=value`, switches without a
// value, and positional arguments. Unknown flags are errors that name the nearest known one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gemmax {

struct FlagSpec {
  const char* name;  // without the leading "--"
  bool takes_value = true;
};

class Flags {
 public:
  Flags(const char* command, int argc, char** argv, const std::vector<FlagSpec>& specs,
        bool allow_positional = false);

  bool help() const { return help_; }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  // Required flags throw "gemmax <command>: missing --name" when absent.
  const std::string& get(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

}  // namespace gemmax

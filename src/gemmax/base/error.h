// Errors: one exception type carrying a message that names the problem and the fix.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace gemmax {

// Thrown for bad input (config, files, data) and broken invariants. The tools catch it at
// the top, print "error: <message>" and exit non-zero.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <class... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}

}  // namespace gemmax

// Checks an invariant in every build type (these guard shapes and file contents, not hot loops).
#define GEMMAX_CHECK(cond, ...)                                                   \
  do {                                                                            \
    if (!(cond)) ::gemmax::fail(__FILE__, ":", __LINE__, ": ", __VA_ARGS__);      \
  } while (0)

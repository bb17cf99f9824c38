#include "gemmax/base/checked.h"

#include "gemmax/base/error.h"

namespace gemmax {

void fail_size_overflow(std::string_view what, int64_t a, int64_t b, char op) {
  fail(what, " (", a, " ", op, " ", b, ") does not fit in 64 bits: the sizes are too large; "
       "lower one of them");
}

}  // namespace gemmax

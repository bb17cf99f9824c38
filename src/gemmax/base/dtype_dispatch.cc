#include "gemmax/base/dtype_dispatch.h"

#include <algorithm>
#include <string>

#include "gemmax/base/error.h"

namespace gemmax {

void fail_dtype(std::string_view op, const Tensor& t, std::initializer_list<DType> accepted) {
  std::string names;
  for (const DType* d = accepted.begin(); d != accepted.end(); ++d)
    names += std::string(d == accepted.begin()     ? ""
                         : d + 1 == accepted.end() ? " or "
                                                   : ", ") +
             std::string(dtype_name(*d));
  const bool wide = t.dtype() == DType::F64 &&
                    std::find(accepted.begin(), accepted.end(), DType::F64) == accepted.end();
  fail(op, ": ", t.str(), " is not supported here: expected ", names,
       wide ? " (float64 runs: backend=reference)" : "");
}

}  // namespace gemmax

#include "gemmax/backend/backend.h"

#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/error.h"

namespace gemmax {

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.name == "reference") return std::make_unique<ReferenceBackend>();
  fail("unknown backend '", options.name, "': available backends are: reference");
}

}  // namespace gemmax

// The one place that knows every backend: picks one by its name (config key `backend`).
#pragma once

#include <memory>
#include <string>

#include "gemmax/backend/backend.h"
#include "gemmax/backend/backend_options.h"

namespace gemmax {

// Throws gemmax::Error naming the known backends.
std::unique_ptr<Backend> make_backend(const BackendOptions& options);
inline std::unique_ptr<Backend> make_backend(const std::string& name) {
  BackendOptions o;
  o.name = name;
  return make_backend(o);
}

}  // namespace gemmax

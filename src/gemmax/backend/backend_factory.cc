#include "gemmax/backend/backend_factory.h"

#include <omp.h>

#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cuda_module.h"
#include "gemmax/backend/cuda/emu/emulated_backend.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/error.h"

namespace gemmax {

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.name == "reference") {
    if (options.num_threads > 0) omp_set_num_threads(options.num_threads);
    return std::make_unique<ReferenceBackend>();
  }
  if (options.name == "cpu") return std::make_unique<CpuBackend>(options);
  if (options.name == "cuda") return cuda::make_cuda_backend(options);
  if (options.name == "cuda_emulated")
    return std::make_unique<cuda::EmulatedBackend>(options);
  fail("unknown backend '", options.name,
       "': available backends are: cpu, reference, cuda, cuda_emulated (the cuda kernels run on "
       "the host, for tests)");
}

}  // namespace gemmax

#include "gemmax/backend/backend.h"

#include <omp.h>

#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cuda/cuda_factory.h"
#include "gemmax/backend/cuda/emulated_backend.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/error.h"

namespace gemmax {

namespace {
[[noreturn]] void no_vocab_ce(const Backend& be) {
  fail("the ", be.name(),
       " backend has no vocabulary-parallel cross-entropy: ", "set fsdp_embedding=gather");
}
}  // namespace

void Backend::vocab_ce_max(const Tensor&, const Tensor&, double) { no_vocab_ce(*this); }
void Backend::vocab_ce_sums(const Tensor&, const Tensor&, const Tensor&) { no_vocab_ce(*this); }
void Backend::vocab_ce_finish(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, double, double, int64_t, int64_t, bool) {
  no_vocab_ce(*this);
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.name == "reference") {
    if (options.num_threads > 0) omp_set_num_threads(options.num_threads);
    return std::make_unique<ReferenceBackend>();
  }
  if (options.name == "cpu") return std::make_unique<CpuBackend>(options);
  if (options.name == "cuda") return cuda::make_cuda_backend(options);
  if (options.name == "cuda_emulated")
    return std::make_unique<cuda::EmulatedBackend>(options.cuda_kernels != "simple");
  fail("unknown backend '", options.name,
       "': available backends are: cpu, reference, cuda, cuda_emulated (the cuda kernels run on "
       "the host, for tests)");
}

}  // namespace gemmax

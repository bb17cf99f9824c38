// Stand-ins for libgemmax_cuda.so that the loader must refuse by name
// (backend/cuda_module_test.cc): built with FAKE_OTHER_SOURCES, a module of another build (its
// interface hash differs); built linked to a library that is then not on the loader's path, a
// module whose CUDA library is missing.
#include "gemmax/backend/cuda/module_api.h"

namespace {
const gemmax::cuda::ModuleApi kApi = {
    .interface = "0000000000000000",
    .compiler = __VERSION__,
};
}  // namespace

extern "C" const gemmax::cuda::ModuleApi* gemmax_cuda_module() { return &kApi; }

#ifdef FAKE_NEEDS_ABSENT
extern "C" int gemmax_fake_absent();  // in libgemmax_fake_absent.so, off the loader's path
extern "C" int gemmax_fake_uses_absent() { return gemmax_fake_absent(); }
#endif

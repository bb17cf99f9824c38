#include "gemmax/backend/cuda_module.h"

#include <cstdlib>
#include <mutex>

#include "gemmax/backend/cuda/module_api.h"
#include "gemmax/base/module_interface.h"  // generated: GEMMAX_MODULE_INTERFACE
#include "gemmax/base/error.h"
#include "gemmax/base/shared_module.h"
#include "gemmax/base/strings.h"

// Set by the build when it makes the module (CMake found nvcc).
#ifndef GEMMAX_CUDA_MODULE_BUILT
#define GEMMAX_CUDA_MODULE_BUILT 0
#endif

namespace gemmax::cuda {
namespace {

constexpr const char kModuleFile[] = "libgemmax_cuda.so";
constexpr const char kModuleEnv[] = "GEMMAX_CUDA_MODULE";

// Why the module was not found, and what to do.
std::string not_found(const SharedModule& m) {
  if (std::getenv(kModuleEnv) && *std::getenv(kModuleEnv))
    return str_cat("the cuda module ", m.looked_in.at(0), " (", kModuleEnv,
                   ") does not exist: point ", kModuleEnv, " at the ", kModuleFile,
                   " built with this gemmax, or unset it");
  if (!GEMMAX_CUDA_MODULE_BUILT)
    return str_cat("this gemmax was built without CUDA (CMake found no nvcc), so it has no cuda "
                   "module: ", m.error, ". Install the CUDA toolkit (12.4 or newer) and rebuild: "
                   "cmake -S . -B build -DGEMMAX_CUDA=ON && cmake --build build");
  return str_cat("the cuda module is not beside this gemmax: ", m.error, ". Copy ", kModuleFile,
                 " from the build's bin/ folder next to the binary, or point ", kModuleEnv, " at it");
}

struct State {
  std::once_flag once;
  const ModuleApi* api = nullptr;
  SharedModule module;
  LoadedModule loaded;
  std::string error;
};

State& state() {
  static State s;
  return s;
}

void load(State& s) {
  s.module = open_shared_module(kModuleFile, kModuleEnv,
                                "the CUDA libraries it was built against (the CUDA runtime, "
                                "cuBLASLt, cuDNN 9, NVRTC, NCCL)");
  const SharedModule& m = s.module;
  if (m.failure == SharedModule::Failure::kNotFound) {
    s.error = not_found(m);
    return;
  }
  if (m.handle == nullptr) {
    s.error = m.error;
    if (m.failure == SharedModule::Failure::kMissingLibrary)
      s.error += " (backend=cpu needs none of them)";
    return;
  }
  using Entry = const ModuleApi* (*)();
  auto entry = reinterpret_cast<Entry>(module_symbol(m, "gemmax_cuda_module"));
  if (entry == nullptr) {
    s.error = str_cat(m.path, " is not a gemmax cuda module (it has no gemmax_cuda_module entry "
                      "point): point ", kModuleEnv, " at the ", kModuleFile,
                      " built with this gemmax");
    return;
  }
  const ModuleApi* api = entry();
  if (std::string(api->interface) != GEMMAX_MODULE_INTERFACE ||
      std::string(api->compiler) != __VERSION__) {
    s.error = str_cat("the cuda module ", m.path,
                      " was built from other gemmax sources than this binary (interface ",
                      api->interface, ", compiler ", api->compiler, "; this binary: ",
                      GEMMAX_MODULE_INTERFACE, ", ", __VERSION__,
                      "): rebuild both from one tree, or point ", kModuleEnv, " at the ",
                      kModuleFile, " built with this gemmax");
    return;  // left mapped: its static objects have run, and unmapping gains nothing
  }
  s.api = api;
  s.loaded.path = m.path;
  s.loaded.versions = api->versions();
  s.loaded.cudnn_frontend_version = api->cudnn_frontend_version();
  s.loaded.cudnn_unavailable = api->cudnn_unavailable();
  s.loaded.has_nccl = module_symbol(m, kNcclCommEntry) != nullptr;
}

const ModuleApi& api() {
  State& s = state();
  std::call_once(s.once, [&] { load(s); });
  if (s.api == nullptr) fail("backend=cuda: ", s.error);
  return *s.api;
}

}  // namespace

const LoadedModule& cuda_module() {
  api();
  return state().loaded;
}

bool cuda_module_loads(std::string* why) {
  try {
    api();
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

void* cuda_module_symbol(const char* name) {
  api();
  return module_symbol(state().module, name);
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return api().make_backend(options);
}

bool cuda_device_available(std::string* why) {
  if (!cuda_module_loads(why)) return false;
  return api().device_available(why);
}

int use_device_of_rank(int rank) { return api().use_device_of_rank(rank); }

void* compute_stream(Backend& be) {
  if (be.name() != "cuda") fail("the ", be.name(), " backend has no CUDA stream");
  return api().compute_stream(be);
}

void* comm_stream(Backend& be) {
  if (be.name() != "cuda") fail("the ", be.name(), " backend has no CUDA stream");
  return api().comm_stream(be);
}

}  // namespace gemmax::cuda

// The one entry point of the cuda module (libgemmax_cuda.so): a table of functions that the
// binary's loader (backend/cuda_module.cc) finds by name with dlsym. The backend it makes is an
// ordinary Backend, so the op table (backend.h) is the interface: nothing else crosses.
//
// Both sides are compiled from the same sources by the same compiler, and the loader checks
// that they were: `interface` is a hash of every header whose layout the two share (base/,
// backend/, parallel/comm.h), made by the build (cmake/module_interface.cmake), and `compiler`
// the compiler's version. A module from other sources is refused by name, never called.
#pragma once

#include <memory>
#include <string>

#include "gemmax/backend/backend.h"
#include "gemmax/backend/backend_options.h"

namespace gemmax::cuda {

struct ModuleApi {
  const char* interface;  // GEMMAX_MODULE_INTERFACE of the module's build
  const char* compiler;   // __VERSION__ of the compiler that built it
  // What the module was built with and what it loaded: CUDA runtime, cuBLASLt, cuDNN, NCCL.
  std::string (*versions)();
  std::unique_ptr<Backend> (*make_backend)(const BackendOptions& options);
  bool (*device_available)(std::string* why);
  int (*use_device_of_rank)(int rank);
  void* (*compute_stream)(Backend& cuda_backend);
  void* (*comm_stream)(Backend& cuda_backend);
  std::string (*cudnn_frontend_version)();  // "" when built without cuDNN's frontend
  std::string (*cudnn_unavailable)();       // why cuDNN's attention cannot run ("" when it can)
};

}  // namespace gemmax::cuda

// Defined by the module only.
extern "C" const gemmax::cuda::ModuleApi* gemmax_cuda_module();
// The module's NCCL comm (parallel/comm_nccl.cc), when the module was built with NCCL: found by
// name, since the backend layer does not know comms. Typed in parallel/comm_nccl.h.
inline constexpr const char kNcclCommEntry[] = "gemmax_make_nccl_comm";

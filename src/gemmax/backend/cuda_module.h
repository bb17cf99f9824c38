// The cuda backend as the rest of gemmax sees it. It lives in a shared module,
// libgemmax_cuda.so, built beside the binary when CMake finds nvcc, and loaded with dlopen the
// first time a run asks for it (backend=cuda): the binary itself links no CUDA library, so it
// starts, and trains on the cpu, on machines that have none. The module is looked for where
// GEMMAX_CUDA_MODULE points, else beside the binary, else in ../lib and ../bin next to it.
#pragma once

#include <memory>
#include <string>

#include "gemmax/backend/backend.h"
#include "gemmax/backend/backend_options.h"

namespace gemmax::cuda {

// The module as loaded.
struct LoadedModule {
  std::string path;
  std::string versions;                // CUDA runtime, cuBLASLt, cuDNN, NCCL: built and loaded
  std::string cudnn_frontend_version;  // "" when built without it
  std::string cudnn_unavailable;       // why cuDNN's attention cannot run ("" when it can)
  bool has_nccl = false;
};

// Loads the module once (later calls return the same). Throws gemmax::Error naming the file and
// what is wrong: no module (and whether this gemmax was built with one), a CUDA library it
// needs that the loader cannot find, or a module built from other sources.
const LoadedModule& cuda_module();
// Whether the module loads; if not, *why says why in one line (nothing is thrown).
bool cuda_module_loads(std::string* why);
// A symbol of the loaded module, or null (loads the module first; throws as cuda_module()).
void* cuda_module_symbol(const char* name);

// The backend on the current CUDA device. Throws gemmax::Error when the module cannot be loaded
// or when no device can be used (naming why).
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);

// Whether a CUDA device can run the backend; if not, *why says why in one line.
bool cuda_device_available(std::string* why);

// Several ranks on one machine: makes device (local_rank mod devices) this process's own, before
// its backend is made. The local rank is the launcher's (OMPI_COMM_WORLD_LOCAL_RANK), else `rank`.
// Returns the device.
int use_device_of_rank(int rank);
// The cudaStream_t (as void*) a backend=cuda backend runs its kernels on, and its collectives on.
void* compute_stream(Backend& cuda_backend);
void* comm_stream(Backend& cuda_backend);

}  // namespace gemmax::cuda

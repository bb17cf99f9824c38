// The cuda backend as seen from code that nvcc does not compile.
#pragma once

#include <memory>
#include <string>

#include "gemmax/backend/backend.h"
#include "gemmax/backend/backend_options.h"

namespace gemmax::cuda {

// The backend on the current CUDA device. Throws gemmax::Error when this build has no CUDA
// (naming how to build with it) or when no device can be used (naming why).
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);

// Whether a CUDA device can run the backend; if not, *why says why in one line.
bool cuda_device_available(std::string* why);

// Whether this build has the cuda backend.
bool cuda_compiled();

// Several ranks on one machine: makes device (local_rank mod devices) this process's own, before
// its backend is made. The local rank is the launcher's (OMPI_COMM_WORLD_LOCAL_RANK), else `rank`.
// Returns the device.
int use_device_of_rank(int rank);
// The cudaStream_t (as void*) a backend=cuda backend runs its kernels on, and its collectives on.
void* compute_stream(Backend& cuda_backend);
void* comm_stream(Backend& cuda_backend);

}  // namespace gemmax::cuda

// The cuda backend's entry points in a build without CUDA (cuda_backend.cu replaces this file
// when CMake finds nvcc).
#ifndef GEMMAX_WITH_CUDA

#include "gemmax/backend/cuda/cuda_factory.h"
#include "gemmax/base/error.h"

namespace gemmax::cuda {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
  fail(
      "backend=cuda: this gemmax was built without CUDA (CMake found no nvcc). Install the CUDA "
      "toolkit (12.4 or newer) and rebuild: cmake -S . -B build -DGEMMAX_CUDA=ON && cmake --build "
      "build");
}

bool cuda_device_available(std::string* why) {
  if (why) *why = "this gemmax was built without CUDA";
  return false;
}

bool cuda_compiled() { return false; }

int use_device_of_rank(int) { return 0; }  // make_cuda_backend says what is missing

void* compute_stream(Backend& be) { fail("the ", be.name(), " backend has no CUDA stream"); }
void* comm_stream(Backend& be) { fail("the ", be.name(), " backend has no CUDA stream"); }

}  // namespace gemmax::cuda

#endif

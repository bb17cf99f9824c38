// cuDNN's fused attention (SDPA), forward and backward, through cuDNN's C++ frontend: graphs
// built once per SdpaPlan (cudnn_attention_plan.h) and run on the backend's stream. The frontend
// is a build dependency (CMake fetches it by pinned version, or GEMMAX_CUDNN_FRONTEND_DIR names
// it); a build without it keeps this interface, and cuda_attention=cudnn is refused by name.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>

#include "gemmax/backend/cuda/cudnn_attention_plan.h"

namespace gemmax::cuda {

// The cuDNN frontend's version this build has ("" when it was built without it).
std::string cudnn_frontend_version();
// The cuDNN library loaded ("" when the build has no frontend).
std::string cudnn_library_version();
// Why cuDNN's attention cannot run in this process ("" when it can): no frontend in the build,
// or a cuDNN library older than the one the build was compiled against (major differs or below
// 9.19: the sliding window with GQA in the backward needs it).
std::string cudnn_unavailable();

class CudnnAttention {
 public:
  // Gives `bytes` of device workspace, valid in stream order until the next call.
  using Workspace = std::function<void*(int64_t bytes)>;

  explicit CudnnAttention(cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Each returns "" when cuDNN ran the call, else why cuDNN refused the graph (said once per
  // plan; the caller runs the kernels instead). A failure while running raises.
  std::string forward(const SdpaPlan& plan, void* o, float* lse, const void* q, const void* k,
                      const void* v, const Workspace& workspace);
  std::string backward(const SdpaPlan& plan, void* dq, void* dk, void* dv, const void* dout,
                       const void* q, const void* k, const void* v, const void* o,
                       const float* lse, const Workspace& workspace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gemmax::cuda

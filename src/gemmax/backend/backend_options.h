// What a backend is built with: the config keys backend, num_threads, cpu_kernels, cuda_kernels,
// cuda_gmm, cuda_attention and cuda_sync_check. The backends read it; the factory (backend_factory.h) picks one by name.
#pragma once

#include <cstdint>
#include <string>

namespace gemmax {

// What a backend is built with (config keys backend, num_threads, cpu_kernels).
struct BackendOptions {
  std::string name = "cpu";
  int num_threads = 0;       // 0: the cores this process may use
  std::string isa = "auto";  // cpu_kernels: auto | amx | amx_emulated | avx512_fp32 | avx512_bf16 | avx2
  // cpu: attention's scratch per thread (0: 8 MiB; twice that for avx512_fp32, whose packed
  // panels are fp32). Tests shrink it to reach the paths that
  // long sequences take: key panels repacked per use, the backward's keys in chunks.
  int64_t attention_scratch_bytes = 0;
  // cuda: fast (tensor-core kernels for bfloat16 attention and grouped matmuls) | simple (the
  // plain kernels they are tested against)
  std::string cuda_kernels = "fast";
  // cuda: the grouped matmul's forward on mma (mma.sync, the default) or sm90 (TMA, mbarrier
  // and wgmma; sm_90a GPUs)
  std::string cuda_gmm = "mma";
  // cuda: bfloat16 attention, forward and backward, on mma (mma.sync, the default), sm90 (TMA,
  // mbarrier and wgmma; sm_90a GPUs) or cudnn (cuDNN's fused attention where it takes the
  // shape, sm90 elsewhere)
  std::string cuda_attention = "mma";
  // cuda: synchronise and check after every kernel launch, so that a fault names its kernel
  // (slow: for the first run on a new GPU or a new build)
  bool cuda_sync_check = false;
};

// cuda_attention, parsed (backend_options in train/memory_budget.h has checked the name).
enum class CudaAttention { kMma, kSm90, kCudnn };
inline CudaAttention cuda_attention_path(const std::string& name) {
  return name == "sm90" ? CudaAttention::kSm90
         : name == "cudnn" ? CudaAttention::kCudnn
                           : CudaAttention::kMma;
}
// How a backend's description names the attention path ("" for the default).
inline const char* attention_note(CudaAttention a) {
  return a == CudaAttention::kSm90    ? ", attention on sm90 wgmma/TMA"
         : a == CudaAttention::kCudnn ? ", attention on cuDNN (sm90 where it refuses)"
                                      : "";
}

}  // namespace gemmax

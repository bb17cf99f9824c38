// What a backend is built with: the config keys backend, num_threads, cpu_kernels, cuda_kernels,
// cuda_gmm, cuda_attention and cuda_sync_check (config/keys.h says what each means). The backends
// read it; the factory (backend_factory.h) picks one by name.
#pragma once

#include <cstdint>
#include <string>

#include "gemmax/base/value_names.h"

namespace gemmax {

enum class BackendKind { Cpu, Reference, Cuda, CudaEmulated };
GEMMAX_VALUE_NAMES(BackendKind, {BackendKind::Cpu, "cpu"}, {BackendKind::Reference, "reference"},
                   {BackendKind::Cuda, "cuda"}, {BackendKind::CudaEmulated, "cuda_emulated"})

// The cpu backend's product kernels: one per CPU family, or auto (the best this CPU runs).
enum class CpuKernels { Auto, Amx, AmxEmulated, Avx512Fp32, Avx512Bf16, Avx2 };
GEMMAX_VALUE_NAMES(CpuKernels, {CpuKernels::Auto, "auto"}, {CpuKernels::Amx, "amx"},
                   {CpuKernels::AmxEmulated, "amx_emulated"},
                   {CpuKernels::Avx512Fp32, "avx512_fp32"},
                   {CpuKernels::Avx512Bf16, "avx512_bf16"}, {CpuKernels::Avx2, "avx2"})

enum class CudaKernels { Fast, Simple };
GEMMAX_VALUE_NAMES(CudaKernels, {CudaKernels::Fast, "fast"}, {CudaKernels::Simple, "simple"})

enum class CudaGmm { Mma, Sm90 };
GEMMAX_VALUE_NAMES(CudaGmm, {CudaGmm::Mma, "mma"}, {CudaGmm::Sm90, "sm90"})

enum class CudaAttention { kMma, kSm90, kCudnn };
GEMMAX_VALUE_NAMES(CudaAttention, {CudaAttention::kMma, "mma"}, {CudaAttention::kSm90, "sm90"},
                   {CudaAttention::kCudnn, "cudnn"})

struct BackendOptions {
  std::string name = "cpu";  // a BackendKind's name: tests and tools make backends by name
  int num_threads = 0;       // 0: the cores this process may use
  std::string isa = "auto";  // a CpuKernels name (cpu/isa.h chooses and checks it)
  // cpu: attention's scratch per thread (0: 16 MiB; twice that for avx512_fp32, whose packed
  // panels are fp32). Tests shrink it to reach the paths that long sequences take: key panels
  // repacked per use, the backward's keys in chunks.
  int64_t attention_scratch_bytes = 0;
  CudaKernels cuda_kernels = CudaKernels::Fast;
  CudaGmm cuda_gmm = CudaGmm::Mma;
  CudaAttention cuda_attention = CudaAttention::kMma;
  bool cuda_sync_check = false;
};

// How a backend's description names the attention path ("" for the default).
inline const char* attention_note(CudaAttention a) {
  return a == CudaAttention::kSm90   ? ", attention on sm90 wgmma/TMA"
         : a == CudaAttention::kCudnn ? ", attention on cuDNN (sm90 where it refuses)"
                                     : "";
}

}  // namespace gemmax

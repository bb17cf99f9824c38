#include "gemmax/backend/cuda/emu/emulated_backend.h"

#include "gemmax/backend/cuda/device_error.h"
#include "gemmax/backend/cuda/ops/attention_ops.h"
#include "gemmax/backend/cuda/ops/elementwise_ops.h"
#include "gemmax/backend/cuda/ops/embedding_ops.h"
#include "gemmax/backend/cuda/ops/geglu_ops.h"
#include "gemmax/backend/cuda/ops/gmm_ops.h"
#include "gemmax/backend/cuda/ops/loss_ops.h"
#include "gemmax/backend/cuda/ops/moe_ops.h"
#include "gemmax/backend/cuda/ops/norm_rope_ops.h"
#include "gemmax/backend/cuda/ops/optimizer_ops.h"
#include "gemmax/backend/cuda/ops/quantize_ops.h"

namespace gemmax::cuda {
namespace {

constexpr int64_t kScratchBytes = int64_t(16) << 20;

}  // namespace

EmulatedBackend::EmulatedBackend(const BackendOptions& options) {
  scratch_ = alloc({kScratchBytes}, DType::U8, MemKind::Workspace);
  char* base = static_cast<char*>(scratch_.raw());
  std::memset(base, 0, 256);
  p_.errors_ = reinterpret_cast<kern::DeviceError*>(base);
  p_.scratch_ = base + 256;
  p_.scratch_bytes_ = size_t(kScratchBytes) - 256;
  p_.fast_kernels_ = options.cuda_kernels == CudaKernels::Fast;
  p_.sm90_gmm_ = options.cuda_gmm == CudaGmm::Sm90;
  p_.attention_ = options.cuda_attention;
  // cuDNN's kernels are a library's, not PTX the emulator can run: refused by name (its host
  // glue is tested without a GPU, its kernels by bench/gpu_check.sh on one).
  GEMMAX_CHECK(p_.attention_ != CudaAttention::kCudnn,
               "cuda_attention=cudnn: backend=cuda_emulated cannot run cuDNN's kernels (a library's, "
               "not the backend's own): cuda_attention=mma here; cudnn runs on backend=cuda");
}

std::string EmulatedBackend::describe() const {
  return str_cat(name(), " (the cuda kernels on the host, ",
                 p_.fast_kernels() ? "tensor-core" : "plain", " kernels for bfloat16",
                 p_.sm90_gmm() ? ", grouped matmuls on sm90 wgmma/TMA" : "",
                 attention_note(p_.attention_), ")");
}

Tensor EmulatedBackend::alloc(const Shape& shape, DType dtype, MemKind kind) {
  return Tensor::empty(shape, dtype, kind, tracker());
}

void EmulatedBackend::upload(const Tensor& dst, const Tensor& host) {
  GEMMAX_CHECK(dst.dtype() == host.dtype() && dst.numel() == host.numel(), "upload: ", host.str(),
               " into ", dst.str());
  std::memcpy(dst.raw(), host.raw(), host.nbytes());
}

Tensor EmulatedBackend::to_host(const Tensor& t) {
  const kern::DeviceError e = *p_.errors_;
  if (e.code != kern::DeviceError::kNone) {
    *p_.errors_ = kern::DeviceError{};
    raise_device_error(e);
  }
  return t;
}

template class KernelBackend<EmuPlatform>;

}  // namespace gemmax::cuda

// The cuda backend's kernels run on the host (backend=cuda_emulated): every thread of a block a
// fiber (emu/), device memory plain host memory, dense matmuls by the reference backend (the
// GPU uses cuBLASLt for them). Slow; it exists so that the CPU test suite runs the very kernels
// a GPU runs, against the reference backend, on machines without a GPU.
#pragma once

#include <cstring>
#include <memory>

#include "gemmax/backend/backend_options.h"
#include "gemmax/backend/cuda/emu/emu_exec.h"
#include "gemmax/backend/cuda/kernel_backend.h"
#include "gemmax/backend/cuda/ops/common.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax::cuda {

// Shared memory one block may use on sm_90 (227 KiB): launches past it fail here as on the GPU.
constexpr size_t kMaxBlockSmem = 227 * 1024;

class EmuPlatform {
 public:
  template <class K, class... A>
  void launch(const Launch& l, A... args) {
    GEMMAX_CHECK(l.threads > 0 && l.threads <= K::kMaxThreads && l.threads % 32 == 0 &&
                     l.smem <= kMaxBlockSmem && l.gx > 0 && l.gy > 0 && l.gz > 0 && l.gy <= 65535 &&
                     l.gz <= 65535,
                 "launch of ", l.threads, " threads (kernel limit ", K::kMaxThreads, "), ", l.smem,
                 " bytes of shared memory, grid ", l.gx, " x ", l.gy, " x ", l.gz);
    emu::BlockEmulator& e = emu::block_emulator();
    const emu::Dim3 grid{l.gx, l.gy, l.gz};
    for (uint32_t z = 0; z < l.gz; ++z)
      for (uint32_t y = 0; y < l.gy; ++y)
        for (uint32_t x = 0; x < l.gx; ++x)
          e.run_block(l.threads, l.smem, [&](int t) {
            emu::EmuExec ex(e, t, l.threads, emu::Dim3{x, y, z}, grid);
            K{}(ex, args...);
          });
  }
  void copy_bytes(void* dst, const void* src, size_t n) { std::memmove(dst, src, n); }
  Scratch scratch() { return Scratch(scratch_, scratch_bytes_); }
  kern::DeviceError* errors() { return errors_; }
  bool fast_kernels() const { return fast_kernels_; }
  SlowPathNotes& slow_paths() { return slow_paths_; }
  bool sm90_gmm() const { return sm90_gmm_; }
  CudaAttention attention_path() const { return attention_; }
  void encode_tensor_map(kern::TensorMap2d&) {}  // the emulator reads the plain fields
  void encode_tensor_map(kern::TensorMap3d&) {}
  void matmul(const Tensor& c, const Tensor& a, bool ta, const Tensor& b, bool tb, bool acc) {
    reference_.do_matmul({.c = c, .a = a, .trans_a = ta, .b = b, .trans_b = tb, .accumulate = acc},
                         {});
  }

 private:
  friend class EmulatedBackend;
  char* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  kern::DeviceError* errors_ = nullptr;
  bool fast_kernels_ = true;
  bool sm90_gmm_ = false;
  CudaAttention attention_ = CudaAttention::kMma;
  SlowPathNotes slow_paths_;
  ReferenceBackend reference_;
};

class EmulatedBackend final : public KernelBackend<EmuPlatform> {
 public:
  // Reads cuda_kernels (fast: the tensor-core kernels of bfloat16 runs too), cuda_gmm and
  // cuda_attention; the other options are the GPU's.
  explicit EmulatedBackend(const BackendOptions& options = {});

  std::string name() const override { return "cuda_emulated"; }
  std::string describe() const override;
  Tensor alloc(const Shape& shape, DType dtype, MemKind kind) override;
  void upload(const Tensor& dst, const Tensor& host) override;
  Tensor to_host(const Tensor& t) override;
  int64_t persistent_bytes() const override { return scratch_.defined() ? scratch_.numel() : 0; }

 private:
  Tensor scratch_;
};

}  // namespace gemmax::cuda

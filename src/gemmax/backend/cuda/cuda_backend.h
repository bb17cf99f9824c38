// The cuda backend (backend=cuda): the kernels of kernels/ on an NVIDIA GPU (built for sm_90a,
// Hopper), dense matmuls through cuBLASLt, device memory from a caching allocator. nvcc only;
// other code reaches it through the module's entry point (module_api.h, loaded by cuda_module.h).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "gemmax/backend/backend_options.h"
#include "gemmax/backend/cuda/cudnn_attention.h"
#include "gemmax/backend/cuda/kernel_backend.h"
#include "gemmax/backend/cuda/kernels/sm90_types.h"
#include "gemmax/backend/cuda/ops/common.h"

namespace gemmax::cuda {

// Throws gemmax::Error naming the call and CUDA's message when a CUDA call fails. A sticky
// fault (an illegal address, a trap: the context is lost) is told apart from other errors and
// names the last kernel launched, since kernels run asynchronously and a fault surfaces at a
// later call.
void check_cuda(cudaError_t e, const char* what);
void check_cublas(cublasStatus_t s, const char* what);
// For destructors, which must not throw: says what failed on stderr (the first time only).
void warn_cuda(cudaError_t e, const char* what);
// The kernel (or library call) most recently queued: what a sticky fault names.
void note_launch(const char* name);

// Device memory for tensors. Freed blocks are kept by size and handed out again: every step
// allocates the same sequence, so after the first step nothing reaches cudaMalloc. Blocks are
// reused in host order, which is the compute stream's order; work on another stream must keep
// its tensors alive until an event says it is done. When the device is full the cache is
// released and the allocation retried once.
class DeviceAllocator {
 public:
  static DeviceAllocator& instance();
  void* allocate(size_t bytes);  // a true out-of-memory names the plan's advice
  void release(void* p);
  size_t in_use() const { return in_use_; }
  size_t reserved() const { return reserved_; }
  size_t peak_reserved() const { return peak_reserved_; }

 private:
  static size_t round(size_t bytes);
  void release_cache();  // synchronises the device first

  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;          // size -> block
  std::unordered_map<void*, size_t> size_of_;  // live and cached blocks
  size_t in_use_ = 0, reserved_ = 0, peak_reserved_ = 0;
};

class CudaPlatform {
 public:
  CudaPlatform() = default;
  CudaPlatform(const CudaPlatform&) = delete;
  CudaPlatform& operator=(const CudaPlatform&) = delete;
  ~CudaPlatform();

  template <class K, class... A>
  void launch(const Launch& l, A... args);  // cuda_platform.cuh
  // After a launch: the launch's own error, and with cuda_sync_check the kernel's run.
  void check_launch(const char* kernel);
  void copy_bytes(void* dst, const void* src, size_t n);
  Scratch scratch() { return Scratch(scratch_, scratch_bytes_); }
  kern::DeviceError* errors() { return errors_; }
  bool fast_kernels() const { return fast_kernels_; }
  SlowPathNotes& slow_paths() { return slow_paths_; }
  bool sm90_gmm() const { return sm90_gmm_; }
  CudaAttention attention_path() const { return attention_; }
  // Encodes the map's driver bytes with cuTensorMapEncodeTiled (found at run time through the
  // runtime's driver entry points, so the build needs no libcuda).
  void encode_tensor_map(kern::TensorMap2d& map);
  void encode_tensor_map(kern::TensorMap3d& map);
  void matmul(const Tensor& c, const Tensor& a, bool ta, const Tensor& b, bool tb, bool acc);
  // cuda_attention=cudnn: cuDNN's fused attention (null on the other paths).
  CudnnAttention* cudnn() { return cudnn_.get(); }
  // Device workspace for a library call, valid in stream order until the next one: cuBLASLt's
  // when it is large enough, else a block kept for library calls (grown through the allocator,
  // outside the memory plan).
  void* library_workspace(int64_t bytes);

  cudaStream_t compute_stream() const { return compute_; }
  cudaStream_t comm_stream() const { return comm_; }

 private:
  friend class CudaBackend;
  struct GemmPlan;
  using GemmKey = std::tuple<int64_t, int64_t, int64_t, int, int, int, int, int, int, int, int>;
  GemmPlan& gemm_plan(const GemmKey& key);

  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  char* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  void* workspace_ = nullptr;  // cuBLASLt's
  size_t workspace_bytes_ = 0;
  kern::DeviceError* errors_ = nullptr;
  bool fast_kernels_ = true;
  bool sm90_gmm_ = false;  // cuda_gmm=sm90
  CudaAttention attention_ = CudaAttention::kMma;
  void* encode_tiled_ = nullptr;  // cuTensorMapEncodeTiled
  void find_encode_tiled();
  bool sync_check_ = false;  // cuda_sync_check: synchronise and check after every launch
  SlowPathNotes slow_paths_;
  std::map<GemmKey, std::unique_ptr<GemmPlan>> plans_;
  std::unique_ptr<CudnnAttention> cudnn_;
  void* library_block_ = nullptr;
  size_t library_block_bytes_ = 0;
};

class CudaBackend final : public KernelBackend<CudaPlatform> {
 public:
  explicit CudaBackend(const BackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  std::string describe() const override { return description_; }
  Tensor alloc(const Shape& shape, DType dtype, MemKind kind) override;
  void upload(const Tensor& dst, const Tensor& host) override;
  Tensor to_host(const Tensor& t) override;
  void synchronize() override;
  int64_t persistent_bytes() const override { return scratch_.defined() ? scratch_.numel() : 0; }

  // The streams of the device: kernels run on compute; collectives (parallel/) on comm, ordered
  // against compute with events (wait_for_compute, wait_for_comm).
  cudaStream_t compute_stream() const { return p_.compute_stream(); }
  cudaStream_t comm_stream() const { return p_.comm_stream(); }
  void wait_for_compute();  // comm waits for what compute has issued so far
  void wait_for_comm();     // compute waits for what comm has issued so far

 private:
  Tensor scratch_;
  cudaEvent_t compute_done_ = nullptr, comm_done_ = nullptr;
  std::string description_;
};

}  // namespace gemmax::cuda

// The cpu backend: the training step at the speed of the machine's vector units.
//
// - Products (matmuls, grouped matmuls, attention) run through gemmax's product engine
//   (gemm.h): bf16 inputs with fp32 accumulation on AVX-512 BF16 (vdpbf16ps), the avx2
//   family elsewhere; grouped matmuls read and write tokens in place through row maps.
// - Attention is blocked with an online softmax (attention.cc): fully masked blocks are
//   skipped, memory is O(block).
// - Everything else is fused, vectorised loops over rows (norms, RoPE, GeGLU, router, loss,
//   AdamW), with every reduction in a fixed order: results are bit-identical from run to run
//   at a given thread count.
// - float64 (gradient checks) and the KV-cache attention of decoding run on the reference
//   backend's loops.
//
// Threads: OpenMP, `num_threads` (0: every core the process may use).
#pragma once

#include "gemmax/backend/backend.h"
#include "gemmax/backend/backend_options.h"
#include "gemmax/backend/cpu/gemm.h"
#include "gemmax/backend/cpu/host_allocator.h"
#include "gemmax/backend/cpu/isa.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options);

  std::string name() const override { return "cpu"; }
  std::string describe() const override;
  int64_t persistent_bytes() const override {
    return scratch_.defined() ? int64_t(scratch_.nbytes()) : 0;
  }
  cpu::Isa isa() const { return isa_; }

  Tensor alloc(const Shape& shape, DType dtype, MemKind kind) override;
  void upload(const Tensor& dst, const Tensor& host) override;
  Tensor to_host(const Tensor& t) override { return t; }

 protected:
  // The vocabulary-parallel cross-entropy of FSDP's head (fsdp_embedding=vocab_parallel) and the
  // KV-cache attention run the reference's loops, on the same host buffers (not vectorised yet).
  GEMMAX_BACKEND_OPS(GEMMAX_OP_OVERRIDE)

 private:
  // Declared first: tensors may outlive the backend's other members, never the allocator's
  // blocks it hands out (a tensor alive after the backend holds an owning block: see alloc).
  std::shared_ptr<cpu::HostAllocator> allocator_ = std::make_shared<cpu::HostAllocator>();
  std::string isa_why_;  // before isa_: choose_isa writes it
  cpu::Isa isa_;
  int threads_;
  ReferenceBackend reference_;            // float64 runs, KV-cache attention
  Tensor scratch_;                        // kernel scratch, allocated once (MemKind::Workspace):
  cpu::GemmScratch gemm_;                 // the product engine's packing buffers
  std::vector<void*> attention_scratch_;  // per thread: attention's blocks
  int64_t attention_scratch_bytes_ = 0;
};

}  // namespace gemmax

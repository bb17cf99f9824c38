// The cpu backend: the training step at the speed of the machine's vector units.
//
// - Products (matmuls, grouped matmuls, attention) run through gemmax's product engine
//   (gemm.h): bf16 inputs with fp32 accumulation on AVX-512 BF16 (vdpbf16ps), a portable
//   path elsewhere; grouped matmuls read and write tokens in place through row maps.
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
  const std::string& isa_reason() const { return isa_why_; }  // why this family (isa.h)

  Tensor alloc(const Shape& shape, DType dtype, MemKind kind) override;
  void upload(const Tensor& dst, const Tensor& host) override;
  Tensor to_host(const Tensor& t) override { return t; }

  void fill(const Tensor& x, double value) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void axpy(const Tensor& y, double alpha, const Tensor& x) override;
  void scale(const Tensor& x, double alpha) override;
  void sum_squares(const Tensor& sum, const Tensor& x) override;
  void scaled_sum_forward(const Tensor& y, const Tensor& a, const Tensor& b,
                          const Tensor& s) override;
  void scaled_sum_backward(const Tensor& dab, const Tensor& ds, const Tensor& dy, const Tensor& a,
                           const Tensor& b, const Tensor& s) override;
  void transpose_groups(const Tensor& out, const Tensor& in) override;

  void matmul(const Tensor& c, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
              bool accumulate) override;

  void embedding_forward(const Tensor& x, const Tensor& tokens, const Tensor& table,
                         double scale) override;
  void embedding_backward(const Tensor& dtable, const Tensor& dx, const Tensor& tokens,
                          double scale) override;

  void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w,
                       double eps, double out_scale, const Tensor& residual,
                       bool round_before_scale) override;
  void rmsnorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x,
                        const Tensor& w, const Tensor& rstd, double out_scale,
                        bool accumulate_dx) override;
  void rope_table(const Tensor& table, const Tensor& positions, const Tensor& inv_freq) override;
  void rope(const Tensor& x, const Tensor& table, bool inverse) override;

  void attention_forward(const Tensor& o, const Tensor& lse, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& segment_ids,
                         const AttentionShape& shape) override;
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                          const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                          const Tensor& lse, const Tensor& segment_ids,
                          const AttentionShape& shape) override;
  void attention_decode(const Tensor& o, const Tensor& q, const Tensor& q_pos, const Tensor& k,
                        const Tensor& v, const Tensor& kv_pos, int64_t window) override {
    reference_.attention_decode(o, q, q_pos, k, v, kv_pos, window);
  }

  void geglu_forward(const Tensor& a, const Tensor& h, const Tensor& up) override;
  void geglu_backward(const Tensor& dh, const Tensor& dup, const Tensor& da, const Tensor& h,
                      const Tensor& up) override;

  void router_forward(const Tensor& probs, const Tensor& idx, const Tensor& weights,
                      const Tensor& logits, const Tensor& per_expert_scale,
                      bool renormalize) override;
  void router_backward(const Tensor& dlogits, const Tensor& dper_expert_scale,
                       const Tensor& dweights, const Tensor& probs, const Tensor& idx,
                       const Tensor& per_expert_scale, bool renormalize, const Tensor& lb_dprobs,
                       int64_t seq) override;
  void load_balance_forward(const Tensor& density, const Tensor& loss, const Tensor& probs,
                            const Tensor& idx, int64_t seq, double coefficient) override;

  void route_sort(const Routing& routing, const Tensor& idx, int64_t num_experts) override;
  void permute(const Tensor& xs, const Tensor& x, const Tensor& order, int64_t k) override;
  void permute_backward(const Tensor& dx, const Tensor& dxs, const Tensor& inverse, int64_t k,
                        bool accumulate) override;
  void combine_forward(const Tensor& m, const Tensor& y, const Tensor& inverse,
                       const Tensor& weights) override;
  void combine_backward(const Tensor& dy, const Tensor& dweights, const Tensor& dm, const Tensor& y,
                        const Tensor& order, const Tensor& weights) override;

  void gmm(const Tensor& out, const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
           const GmmRows& rows) override;
  void gmm_dlhs(const Tensor& dlhs, const Tensor& dout, const Tensor& rhs,
                const Tensor& group_sizes, const GmmRows& rows) override;
  void gmm_drhs(const Tensor& drhs, const Tensor& lhs, const Tensor& dout,
                const Tensor& group_sizes, const GmmRows& rows) override;

  void softcap_cross_entropy(const Tensor& logits, const Tensor& loss, const Tensor& targets,
                             const Tensor& mask, double cap, double grad_scale,
                             bool write_grad) override;
  // The vocabulary-parallel cross-entropy of FSDP's head (fsdp_embedding=vocab_parallel): the
  // reference's loops, on the same host buffers (not vectorised yet).
  void vocab_ce_max(const Tensor& logits, const Tensor& stats, double cap) override {
    reference_.vocab_ce_max(logits, stats, cap);
  }
  void vocab_ce_sums(const Tensor& logits, const Tensor& stats, const Tensor& targets) override {
    reference_.vocab_ce_sums(logits, stats, targets);
  }
  void vocab_ce_finish(const Tensor& logits, const Tensor& loss, const Tensor& stats,
                       const Tensor& targets, const Tensor& mask, double cap, double grad_scale,
                       int64_t loss_begin, int64_t loss_end, bool write_grad) override {
    reference_.vocab_ce_finish(logits, loss, stats, targets, mask, cap, grad_scale, loss_begin,
                               loss_end, write_grad);
  }

  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWStep& step, const Tensor& scalars) override;

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

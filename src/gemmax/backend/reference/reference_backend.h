// The reference backend: plain loops over host memory, fp32, bf16 or fp64, sums in fp64.
//
// It is the ground truth: every other backend's ops are tested against it, and its own ops are
// tested against finite differences in fp64. Loops are written to be obviously right first; OpenMP
// spreads the outer loop over cores so the tiny model still trains in minutes. Every sum runs in
// one fixed order, whatever the thread count.
#pragma once

#include "gemmax/backend/backend.h"

namespace gemmax {

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }

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
                        const Tensor& v, const Tensor& kv_pos, int64_t window) override;

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
  void vocab_ce_max(const Tensor& logits, const Tensor& stats, double cap) override;
  void vocab_ce_sums(const Tensor& logits, const Tensor& stats, const Tensor& targets) override;
  void vocab_ce_finish(const Tensor& logits, const Tensor& loss, const Tensor& stats,
                       const Tensor& targets, const Tensor& mask, double cap, double grad_scale,
                       int64_t loss_begin, int64_t loss_end, bool write_grad) override;

  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWStep& step, const Tensor& scalars) override;
};

}  // namespace gemmax

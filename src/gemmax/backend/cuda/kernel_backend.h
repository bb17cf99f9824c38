// The Backend of the cuda kernels, over a platform P that runs them: CudaPlatform on the GPU
// (backend=cuda) or EmuPlatform on the host (the kernels under test). Every op is its function
// in ops/, which checks operands and launches kernels through P.
#pragma once

#include <string>

#include "gemmax/backend/backend.h"
#include "gemmax/backend/cuda/ops/ops.h"

namespace gemmax::cuda {

template <class P>
class KernelBackend : public Backend {
 public:
  P& platform() { return p_; }

  void fill(const Tensor& x, double v) override { ops::fill(p_, x, v); }
  void copy(const Tensor& d, const Tensor& s) override { ops::copy(p_, d, s); }
  void add(const Tensor& o, const Tensor& a, const Tensor& b) override { ops::add(p_, o, a, b); }
  void axpy(const Tensor& y, double a, const Tensor& x) override { ops::axpy(p_, y, a, x); }
  void scale(const Tensor& x, double a) override { ops::scale(p_, x, a); }
  void sum_squares(const Tensor& s, const Tensor& x) override { ops::sum_squares(p_, s, x); }
  void scaled_sum_forward(const Tensor& y, const Tensor& a, const Tensor& b,
                          const Tensor& s) override {
    ops::scaled_sum_forward(p_, y, a, b, s);
  }
  void scaled_sum_backward(const Tensor& dab, const Tensor& ds, const Tensor& dy, const Tensor& a,
                           const Tensor& b, const Tensor& s) override {
    ops::scaled_sum_backward(p_, dab, ds, dy, a, b, s);
  }
  void transpose_groups(const Tensor& o, const Tensor& i) override {
    ops::transpose_groups(p_, o, i);
  }
  void matmul(const Tensor& c, const Tensor& a, bool ta, const Tensor& b, bool tb,
              bool acc) override {
    p_.matmul(c, a, ta, b, tb, acc);
  }
  void embedding_forward(const Tensor& x, const Tensor& tokens, const Tensor& table,
                         double scale) override {
    ops::embedding_forward(p_, x, tokens, table, scale);
  }
  void embedding_backward(const Tensor& dtable, const Tensor& dx, const Tensor& tokens,
                          double scale) override {
    ops::embedding_backward(p_, dtable, dx, tokens, scale);
  }
  void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w,
                       double eps, double out_scale, const Tensor& residual,
                       bool round_before_scale) override {
    ops::rmsnorm_forward(p_, y, rstd, x, w, eps, out_scale, residual, round_before_scale);
  }
  void rmsnorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x,
                        const Tensor& w, const Tensor& rstd, double out_scale,
                        bool accumulate_dx) override {
    ops::rmsnorm_backward(p_, dx, dw, dy, x, w, rstd, out_scale, accumulate_dx);
  }
  void rope_table(const Tensor& table, const Tensor& positions, const Tensor& inv_freq) override {
    ops::rope_table(p_, table, positions, inv_freq);
  }
  void rope(const Tensor& x, const Tensor& table, bool inverse) override {
    ops::rope(p_, x, table, inverse);
  }
  void attention_forward(const Tensor& o, const Tensor& lse, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& seg, const AttentionShape& s) override {
    ops::attention_forward(p_, o, lse, q, k, v, seg, s);
  }
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                          const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                          const Tensor& lse, const Tensor& seg, const AttentionShape& s) override {
    ops::attention_backward(p_, dq, dk, dv, dout, q, k, v, o, lse, seg, s);
  }
  void attention_decode(const Tensor& o, const Tensor& q, const Tensor& q_pos, const Tensor& k,
                        const Tensor& v, const Tensor& kv_pos, int64_t window) override {
    ops::attention_decode(p_, o, q, q_pos, k, v, kv_pos, window);
  }
  void geglu_forward(const Tensor& a, const Tensor& h, const Tensor& up) override {
    ops::geglu_forward(p_, a, h, up);
  }
  void geglu_backward(const Tensor& dh, const Tensor& dup, const Tensor& da, const Tensor& h,
                      const Tensor& up) override {
    ops::geglu_backward(p_, dh, dup, da, h, up);
  }
  void router_forward(const Tensor& probs, const Tensor& idx, const Tensor& weights,
                      const Tensor& logits, const Tensor& scale, bool renormalize) override {
    ops::router_forward(p_, probs, idx, weights, logits, scale, renormalize);
  }
  void router_backward(const Tensor& dlogits, const Tensor& dscale, const Tensor& dweights,
                       const Tensor& probs, const Tensor& idx, const Tensor& scale,
                       bool renormalize, const Tensor& lb_dprobs, int64_t seq) override {
    ops::router_backward(p_, dlogits, dscale, dweights, probs, idx, scale, renormalize, lb_dprobs,
                         seq);
  }
  void load_balance_forward(const Tensor& density, const Tensor& loss, const Tensor& probs,
                            const Tensor& idx, int64_t seq, double coefficient) override {
    ops::load_balance_forward(p_, density, loss, probs, idx, seq, coefficient);
  }
  void route_sort(const Routing& r, const Tensor& idx, int64_t num_experts) override {
    ops::route_sort(p_, r, idx, num_experts);
  }
  void permute(const Tensor& xs, const Tensor& x, const Tensor& order, int64_t k) override {
    ops::permute(p_, xs, x, order, k);
  }
  void permute_backward(const Tensor& dx, const Tensor& dxs, const Tensor& inverse, int64_t k,
                        bool accumulate) override {
    ops::permute_backward(p_, dx, dxs, inverse, k, accumulate);
  }
  void combine_forward(const Tensor& m, const Tensor& y, const Tensor& inverse,
                       const Tensor& weights) override {
    ops::combine_forward(p_, m, y, inverse, weights);
  }
  void combine_backward(const Tensor& dy, const Tensor& dweights, const Tensor& dm, const Tensor& y,
                        const Tensor& order, const Tensor& weights) override {
    ops::combine_backward(p_, dy, dweights, dm, y, order, weights);
  }
  void gmm(const Tensor& out, const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
           const GmmRows& rows) override {
    ops::gmm(p_, out, lhs, rhs, group_sizes, rows);
  }
  void gmm_dlhs(const Tensor& dlhs, const Tensor& dout, const Tensor& rhs,
                const Tensor& group_sizes, const GmmRows& rows) override {
    ops::gmm_dlhs(p_, dlhs, dout, rhs, group_sizes, rows);
  }
  void gmm_drhs(const Tensor& drhs, const Tensor& lhs, const Tensor& dout,
                const Tensor& group_sizes, const GmmRows& rows) override {
    ops::gmm_drhs(p_, drhs, lhs, dout, group_sizes, rows);
  }
  void softcap_cross_entropy(const Tensor& logits, const Tensor& loss, const Tensor& targets,
                             const Tensor& mask, double cap, double grad_scale,
                             bool write_grad) override {
    ops::softcap_cross_entropy(p_, logits, loss, targets, mask, cap, grad_scale, write_grad);
  }
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWStep& step, const Tensor& scalars) override {
    ops::adamw_step(p_, param, grad, m, v, step, scalars);
  }

 protected:
  P p_;
};

}  // namespace gemmax::cuda

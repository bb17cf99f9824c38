// The op layer's functions (definitions: the *_ops.h headers beside this one), one per Backend
// op, templated on the platform that runs the kernels (ops/common.h).
#pragma once

#include "gemmax/backend/backend.h"

namespace gemmax::cuda::ops {

// elementwise_ops.h
template <class P>
void fill(P& p, const Tensor& x, double value);
template <class P>
void copy(P& p, const Tensor& dst, const Tensor& src);
template <class P>
void add(P& p, const Tensor& out, const Tensor& a, const Tensor& b);
template <class P>
void axpy(P& p, const Tensor& y, double alpha, const Tensor& x);
template <class P>
void scale(P& p, const Tensor& x, double alpha);
template <class P>
void sum_squares(P& p, const Tensor& sum, const Tensor& x);
template <class P>
void scaled_sum_forward(P& p, const Tensor& y, const Tensor& a, const Tensor& b, const Tensor& s);
template <class P>
void scaled_sum_backward(P& p, const Tensor& dab, const Tensor& ds, const Tensor& dy,
                         const Tensor& a, const Tensor& b, const Tensor& s);
template <class P>
void transpose_groups(P& p, const Tensor& out, const Tensor& in);
template <class P>
void embedding_forward(P& p, const Tensor& x, const Tensor& tokens, const Tensor& table,
                       double scale);
template <class P>
void embedding_backward(P& p, const Tensor& dtable, const Tensor& dx, const Tensor& tokens,
                        double scale);
template <class P>
void adamw_step(P& p, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWStep& step, const Tensor& scalars);

// norm_ops.h
template <class P>
void rmsnorm_forward(P& p, const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w,
                     double eps, double out_scale, const Tensor& residual, bool round_before_scale);
template <class P>
void rmsnorm_backward(P& p, const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x,
                      const Tensor& w, const Tensor& rstd, double out_scale, bool accumulate_dx);
template <class P>
void rope_table(P& p, const Tensor& table, const Tensor& positions, const Tensor& inv_freq);
template <class P>
void rope(P& p, const Tensor& x, const Tensor& table, bool inverse);
template <class P>
void geglu_forward(P& p, const Tensor& a, const Tensor& h, const Tensor& up);
template <class P>
void geglu_backward(P& p, const Tensor& dh, const Tensor& dup, const Tensor& da, const Tensor& h,
                    const Tensor& up);

// attention_ops.h
template <class P>
void attention_forward(P& p, const Tensor& o, const Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& seg, const AttentionShape& s);
template <class P>
void attention_backward(P& p, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& o, const Tensor& lse, const Tensor& seg,
                        const AttentionShape& s);
template <class P>
void attention_decode(P& p, const Tensor& o, const Tensor& q, const Tensor& q_pos, const Tensor& k,
                      const Tensor& v, const Tensor& kv_pos, int64_t window);

// moe_ops.h
template <class P>
void router_forward(P& p, const Tensor& probs, const Tensor& idx, const Tensor& weights,
                    const Tensor& logits, const Tensor& scale, bool renormalize);
template <class P>
void router_backward(P& p, const Tensor& dlogits, const Tensor& dscale, const Tensor& dweights,
                     const Tensor& probs, const Tensor& idx, const Tensor& scale, bool renormalize,
                     const Tensor& lb_dprobs, int64_t seq);
template <class P>
void load_balance_forward(P& p, const Tensor& density, const Tensor& loss, const Tensor& probs,
                          const Tensor& idx, int64_t seq, double coefficient);
template <class P>
void route_sort(P& p, const Routing& r, const Tensor& idx, int64_t num_experts);
template <class P>
void permute(P& p, const Tensor& xs, const Tensor& x, const Tensor& order, int64_t k);
template <class P>
void permute_backward(P& p, const Tensor& dx, const Tensor& dxs, const Tensor& inverse, int64_t k,
                      bool accumulate);
template <class P>
void combine_forward(P& p, const Tensor& m, const Tensor& y, const Tensor& inverse,
                     const Tensor& weights);
template <class P>
void combine_backward(P& p, const Tensor& dy, const Tensor& dweights, const Tensor& dm,
                      const Tensor& y, const Tensor& order, const Tensor& weights);

// gmm_ops.h
template <class P>
void gmm(P& p, const Tensor& out, const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
         const GmmRows& rows);
template <class P>
void gmm_dlhs(P& p, const Tensor& dlhs, const Tensor& dout, const Tensor& rhs,
              const Tensor& group_sizes, const GmmRows& rows);
template <class P>
void gmm_drhs(P& p, const Tensor& drhs, const Tensor& lhs, const Tensor& dout,
              const Tensor& group_sizes, const GmmRows& rows);

// loss_ops.h
template <class P>
void softcap_cross_entropy(P& p, const Tensor& logits, const Tensor& loss, const Tensor& targets,
                           const Tensor& mask, double cap, double grad_scale, bool write_grad);

}  // namespace gemmax::cuda::ops

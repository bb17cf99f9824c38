#include "gemmax/backend/ops/attention.h"

#include "gemmax/backend/ops/check.h"

namespace gemmax {
namespace {

void check_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                  const Tensor& lse, const Tensor& seg, const AttentionShape& s) {
  const int64_t T = s.batch * s.seq;
  GEMMAX_CHECK(s.num_kv_heads > 0 && s.num_heads % s.num_kv_heads == 0, "attention: ", s.num_heads,
               " query heads are not a multiple of ", s.num_kv_heads, " kv heads");
  GEMMAX_CHECK(q.numel() == T * s.num_heads * s.head_dim && o.numel() == q.numel() &&
                   k.numel() == T * s.num_kv_heads * s.head_dim && v.numel() == k.numel() &&
                   lse.numel() == s.batch * s.num_heads * s.seq && seg.numel() == T,
               "attention shapes: q ", q.str(), " k ", k.str(), " v ", v.str(), " o ", o.str(),
               " lse ", lse.str(), " for B=", s.batch, " S=", s.seq, " H=", s.num_heads,
               " KV=", s.num_kv_heads, " hd=", s.head_dim);
}

}  // namespace

void validate(const AttentionForwardArgs& args) {
  const auto& [o, lse, q, k, v, segment_ids, shape] = args;
  check_shapes(q, k, v, o, lse, segment_ids, shape);
}

void validate(const AttentionBackwardArgs& args) {
  const auto& [dq, dk, dv, dout, q, k, v, o, lse, segment_ids, shape] = args;
  check_shapes(q, k, v, o, lse, segment_ids, shape);
  GEMMAX_CHECK(dq.numel() == q.numel() && dk.numel() == k.numel() && dv.numel() == v.numel() &&
                   dout.numel() == q.numel(),
               "attention_backward shapes: dq ", dq.str(), " dk ", dk.str(), " dv ", dv.str(),
               " dout ", dout.str());
}

void validate(const AttentionDecodeArgs& args) {
  const auto& [o, q, q_pos, k, v, kv_pos, window] = args;
  GEMMAX_CHECK(q.ndim() == 3 && k.ndim() == 3 && v.shape() == k.shape() && o.shape() == q.shape() &&
                   q.dim(2) == k.dim(2) && k.dim(1) > 0 && q.dim(1) % k.dim(1) == 0 &&
                   q_pos.numel() == q.dim(0) && kv_pos.numel() == k.dim(0) &&
                   q.dtype() == k.dtype() && v.dtype() == k.dtype() && o.dtype() == q.dtype(),
               "attention_decode shapes: q ", q.str(), " o ", o.str(), " k ", k.str(), " v ",
               v.str(), " q_pos ", q_pos.str(), " kv_pos ", kv_pos.str());
}

}  // namespace gemmax

#include "gemmax/model/context.h"

#include <cmath>

namespace gemmax {

StepInputs alloc_step_inputs(Backend& be, int64_t batch, int64_t seq) {
  const Shape shape{batch * seq};
  StepInputs in;
  in.batch = batch;
  in.seq = seq;
  for (Tensor* t : {&in.tokens, &in.targets, &in.positions, &in.segment_ids, &in.target_mask})
    *t = be.alloc(shape, DType::I32, MemKind::Data);
  return in;
}

StepInputs upload_batch(Backend& be, const Batch& b) {
  const int64_t n = b.batch * b.seq;
  GEMMAX_CHECK(int64_t(b.inputs.size()) == n && b.targets.size() == b.inputs.size() &&
                   b.positions.size() == b.inputs.size() &&
                   b.segment_ids.size() == b.inputs.size() &&
                   b.target_segment_ids.size() == b.inputs.size(),
               "batch fields must all hold batch * seq = ", n, " values");
  StepInputs in = alloc_step_inputs(be, b.batch, b.seq);
  auto up = [&](const Tensor& dst, const std::vector<int32_t>& v) {
    be.upload(dst, Tensor::wrap(const_cast<int32_t*>(v.data()), {n}, DType::I32));
  };
  up(in.tokens, b.inputs);
  up(in.targets, b.targets);
  up(in.positions, b.positions);
  up(in.segment_ids, b.segment_ids);
  up(in.target_mask, b.target_segment_ids);
  in.num_targets = b.num_target_tokens();
  in.one_segment = true;
  for (int64_t i = 0; i < n && in.one_segment; ++i)
    in.one_segment = b.segment_ids[size_t(i)] == b.segment_ids[size_t(i - i % b.seq)];
  in.total_targets = in.num_targets;
  return in;
}

Tensor rope_inv_freq(int64_t head_dim, double theta, double proportion) {
  const int64_t half = head_dim / 2;
  const int64_t rotated = int64_t(proportion * double(head_dim)) / 2;
  Tensor t = Tensor::empty({half}, DType::F64, MemKind::Data);
  double* f = t.data<double>();
  for (int64_t i = 0; i < half; ++i)
    f[i] = i < rotated ? std::pow(theta, -2.0 * double(i) / double(head_dim)) : 0.0;
  return t;
}

Tensor rope_table(Backend& be, const StepInputs& in, const Tensor& inv_freq, DType act) {
  Tensor t = be.alloc({in.tokens_count(), inv_freq.numel(), 2}, stat_dtype(act), MemKind::Data);
  be.rope_table({.table = t, .positions = in.positions, .inv_freq = inv_freq});
  return t;
}

}  // namespace gemmax

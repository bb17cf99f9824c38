#include "gemmax/model/context.h"

#include <cmath>

namespace gemmax {

StepInputs upload_batch(Backend& be, const Batch& b) {
  const Shape shape{b.batch * b.seq};
  GEMMAX_CHECK(int64_t(b.inputs.size()) == shape[0] && b.targets.size() == b.inputs.size() &&
                   b.positions.size() == b.inputs.size() &&
                   b.segment_ids.size() == b.inputs.size() &&
                   b.target_segment_ids.size() == b.inputs.size(),
               "batch fields must all hold batch * seq = ", shape[0], " values");
  auto up = [&](const std::vector<int32_t>& v) {
    Tensor host = Tensor::empty(shape, DType::I32, MemKind::Data);
    std::copy(v.begin(), v.end(), host.data<int32_t>());
    return be.to_device(host, MemKind::Data);
  };
  StepInputs in;
  in.batch = b.batch;
  in.seq = b.seq;
  in.tokens = up(b.inputs);
  in.targets = up(b.targets);
  in.positions = up(b.positions);
  in.segment_ids = up(b.segment_ids);
  in.target_mask = up(b.target_segment_ids);
  in.num_targets = b.num_target_tokens();
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

RematPolicy parse_remat_policy(const std::string& name) {
  if (name == "none") return RematPolicy::None;
  if (name == "minimal") return RematPolicy::Minimal;
  if (name == "full") return RematPolicy::Full;
  fail("unknown remat_policy '", name, "': expected one of full (keep only each layer's input), ",
       "minimal (also keep the matmul outputs), none (keep everything)");
}

const char* remat_policy_name(RematPolicy p) {
  switch (p) {
    case RematPolicy::None: return "none";
    case RematPolicy::Minimal: return "minimal";
    case RematPolicy::Full: return "full";
  }
  return "?";
}

void drop_unsaved(std::initializer_list<Tensor*> tensors) {
  for (Tensor* t : tensors)
    if (t->defined() && t->mem_kind() != MemKind::Activations) *t = Tensor();
}

}  // namespace gemmax

#include "gemmax/train/step.h"

#include <cmath>

namespace gemmax {

TrainState make_train_state(Backend& be, const ParamTable& table,
                            const std::vector<bool>& trainable, DType weight_dtype,
                            const AdamWConfig& config) {
  TrainState s;
  s.weights = be.alloc({table.total()}, weight_dtype, MemKind::Params);
  s.grads = be.alloc({table.total()}, weight_dtype, MemKind::Grads);
  s.optimizer = std::make_unique<AdamW>(be, table, trainable, weight_dtype, config);
  s.scalars = be.zeros({StepScalars::kCount}, DType::F64, MemKind::Data);
  return s;
}

void train_step(Backend& be, Gemma4Model& model, TrainState& state, const StepInputs& in, double lr,
                int64_t t) {
  be.tracker().set_phase("step start");
  be.fill(state.grads, 0.0);
  model.forward_backward(in, state.weights, state.grads, state.scalars);
  be.tracker().set_phase("optimizer");
  state.optimizer->step(state.weights, state.grads, state.scalars, lr, t);
}

StepResult read_step(Backend& be, const Gemma4Model& model, const TrainState& state,
                     const StepInputs& in) {
  const Tensor host = be.to_host(state.scalars);
  StepResult r;
  r.loss = model.losses(host, in);
  r.raw_grad_norm = std::sqrt(get_as_double(host, StepScalars::kGradSumSq));
  r.grad_norm = r.raw_grad_norm * clip_factor(state.optimizer->config().clip_norm, r.raw_grad_norm);
  for (int64_t i = 0; i < StepScalars::kCount; ++i)
    r.applied = r.applied && std::isfinite(get_as_double(host, i));
  return r;
}

}  // namespace gemmax

#include "gemmax/train/step.h"

#include <cmath>
#include <cstring>

#include "gemmax/base/error.h"

namespace gemmax {

TrainState make_train_state(Backend& be, const ParamTable& table,
                            const std::vector<bool>& trainable, DType weight_dtype,
                            const AdamWConfig& config, Comm* comm, const FsdpOptions& fsdp) {
  TrainState s;
  const bool sharded = comm != nullptr && comm->size() > 1;
  if (sharded && table.config().has_per_layer_inputs())
    fail("model '", table.config().name, "': the small block's per-layer inputs are not sharded "
         "under FSDP yet; train it on one rank (", comm->size(), " ranks asked)");
  s.layout = sharded ? ShardLayout::fsdp(table, comm->size(), comm->rank(), fsdp.replicate_small)
                     : ShardLayout::whole(table);
  s.comm = sharded ? comm : nullptr;
  s.fsdp = fsdp;
  s.weights = be.alloc({s.layout.local_total}, weight_dtype, MemKind::Params);
  if (sharded) be.fill({.x = s.weights, .value = 0.0});  // the pieces' zero padding
  s.grads = be.alloc({s.layout.local_total}, weight_dtype, MemKind::Grads);
  s.optimizer = std::make_unique<AdamW>(be, table, s.layout, trainable, weight_dtype, config);
  s.scalars = be.zeros({StepScalars::kCount}, DType::F64, MemKind::Data);
  return s;
}

void upload_weights(Backend& be, const ParamTable& table, TrainState& state, const Tensor& full) {
  if (!state.sharded()) {
    be.upload(state.weights, full);
    return;
  }
  Tensor host = Tensor::zeros({state.layout.local_total}, state.weights.dtype());
  for (size_t i = 0; i < table.specs().size(); ++i) {
    const ParamPiece& p = state.layout.pieces[i];
    if (p.count == 0) continue;
    const Tensor src = full.flat_slice(table.specs()[i].offset + p.begin, {p.count});
    std::memcpy(host.flat_slice(p.local, {p.count}).raw(), src.raw(), src.nbytes());
  }
  be.upload(state.weights, host);
}

namespace {

void after_backward(Backend& be, const Gemma4Model& model, const TrainState& state, int64_t t,
                    bool replicated) {
  if (state.hooks != nullptr && state.hooks->after_backward)
    state.hooks->after_backward(be, model.params(), state, t, replicated);
}

}  // namespace

void train_step(Backend& be, Gemma4Model& model, TrainState& state, const StepInputs& in, double lr,
                int64_t t, const VocabInputs& vocab) {
  be.tracker().set_phase("step start");
  be.fill({.x = state.grads, .value = 0.0});
  if (!state.sharded()) {
    model.forward_backward(in, state.weights, state.grads, state.scalars);
    be.tracker().set_phase("optimizer", StepPart::Optimizer);
    after_backward(be, model, state, t, false);
    after_backward(be, model, state, t, true);
    state.optimizer->step(state.weights, state.grads, state.scalars, lr, t);
    return;
  }
  Comm& comm = *state.comm;
  FsdpParams params(be, comm, model.params(), state.layout, state.fsdp, model.options(),
                    state.weights, state.grads, vocab);
  model.forward_backward(in, params, state.scalars);
  be.tracker().set_phase("optimizer", StepPart::Optimizer);
  comm.set_progress("the optimizer");
  CommRequest replicated = params.finish_gradients();
  // The global gradient norm: the sharded pieces' squares summed over ranks (with the losses),
  // then the replicated parameters', which every rank holds whole and alike.
  const Tensor sum_sq = state.scalars.flat_slice(StepScalars::kGradSumSq, {1});
  be.fill({.x = sum_sq, .value = 0.0});
  after_backward(be, model, state, t, false);
  state.optimizer->sum_squares(state.grads, sum_sq, false);
  comm.all_reduce(state.scalars, ReduceOp::Sum, "the step's losses and gradient norm").wait();
  replicated.wait();
  after_backward(be, model, state, t, true);
  state.optimizer->sum_squares(state.grads, sum_sq, true);
  state.optimizer->apply(state.weights, state.grads, state.scalars, lr, t);
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

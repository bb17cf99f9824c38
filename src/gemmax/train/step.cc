#include "gemmax/train/step.h"

#include <cmath>
#include <cstring>

#include "gemmax/base/error.h"
#include "gemmax/model/lora/lora_params.h"
#include "gemmax/parallel/fsdp_nf4.h"

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

TrainState make_lora_train_state(Backend& be, const ParamTable& table, const AdapterTable& adapters,
                                 DType base_dtype, DType adapter_dtype, const AdamWConfig& config,
                                 Comm* comm, const FsdpOptions& fsdp, LoraWeightQtype qtype,
                                 int64_t nf4_block) {
  const bool sharded = comm != nullptr && comm->size() > 1;
  if (sharded && table.config().has_per_layer_inputs())
    fail("model '", table.config().name,
         "': the small block's per-layer inputs are not sharded "
         "under FSDP yet; train it on one rank (",
         comm->size(), " ranks asked)");
  const bool nf4 = qtype == LoraWeightQtype::Nf4;
  const ParamTable& trained = adapters.params();
  TrainState s;
  s.adapters = &adapters;
  s.base.layout = sharded
                      ? ShardLayout::fsdp(table, comm->size(), comm->rank(), fsdp.replicate_small)
                      : ShardLayout::whole(table);
  if (nf4) {
    s.base.nf4 = alloc_nf4_base(be, table, base_dtype, nf4_block, sharded ? comm->size() : 1,
                                sharded ? comm->rank() : 0);
  } else {
    s.base.weights = be.alloc({s.base.layout.local_total}, base_dtype, MemKind::Params);
    if (sharded) be.fill({.x = s.base.weights, .value = 0.0});  // the pieces' zero padding
  }
  s.layout = ShardLayout::whole(trained);
  s.comm = sharded ? comm : nullptr;
  s.fsdp = fsdp;
  s.weights = be.alloc({trained.total()}, adapter_dtype, MemKind::Params);
  s.grads = be.alloc({trained.total()}, adapter_dtype, MemKind::Grads);
  s.optimizer = std::make_unique<AdamW>(be, trained, s.layout,
                                        std::vector<bool>(trained.specs().size(), true),
                                        adapter_dtype, config);
  s.scalars = be.zeros({StepScalars::kCount}, DType::F64, MemKind::Data);
  return s;
}

std::unique_ptr<StepParams> frozen_base_params(Backend& be, const Gemma4Model& model,
                                               const TrainState& state, const VocabInputs& vocab,
                                               bool backward) {
  const ParamTable& table = model.params();
  const ModelOptions& opt = model.options();
  if (state.base.nf4 && state.sharded())
    return std::make_unique<FsdpNf4Params>(be, *state.comm, table, opt, *state.base.nf4);
  if (state.base.nf4) return std::make_unique<Nf4Params>(be, table, opt, *state.base.nf4);
  if (!state.sharded())
    return std::make_unique<WholeParams>(be, table, opt, state.base.weights, Tensor());
  return std::make_unique<FsdpParams>(be, *state.comm, table, state.base.layout, state.fsdp, opt,
                                      state.base.weights, Tensor(), vocab, backward);
}

void upload_weights(Backend& be, const ParamTable& table, TrainState& state, const Tensor& full) {
  if (state.base.nf4) return upload_nf4_base(be, table, *state.base.nf4, full);
  const ShardLayout& layout = state.model_layout();
  const Tensor& weights = state.model_weights();
  GEMMAX_CHECK(full.dtype() == weights.dtype(), "upload_weights: ", full.str(), " into ",
               weights.str());
  if (!layout.sharded()) {
    be.upload(weights, full);
    return;
  }
  Tensor host = Tensor::zeros({layout.local_total}, weights.dtype());
  for (size_t i = 0; i < table.specs().size(); ++i) {
    const ParamPiece& p = layout.pieces[i];
    if (p.count == 0) continue;
    const Tensor src = full.flat_slice(table.specs()[i].offset + p.begin, {p.count});
    std::memcpy(host.flat_slice(p.local, {p.count}).raw(), src.raw(), src.nbytes());
  }
  be.upload(weights, host);
}

namespace {

void after_backward(Backend& be, const Gemma4Model& model, const TrainState& state, int64_t t,
                    bool replicated) {
  if (state.hooks != nullptr && state.hooks->after_backward)
    state.hooks->after_backward(be, state.trained_table(model), state, t, replicated);
}

// A LoRA run's step: the frozen base's StepParams (its FSDP gathers as in a full run, without
// gradients) under the adapters'; the adapters' gradients summed over the ranks; AdamW on them.
void lora_train_step(Backend& be, Gemma4Model& model, TrainState& state, const StepInputs& in,
                     double lr, int64_t t, const VocabInputs& vocab) {
  DropoutStep dropout{state.dropout_seed ^ (0x9E3779B97F4A7C15ull * uint64_t(t)), 0};
  dropout.seed ^= dropout.seed >> 31;
  // Rank r's rows follow the rows of the ranks before it in the global batch.
  if (state.sharded()) dropout.first_token = state.comm->rank() * in.tokens_count();
  const std::unique_ptr<StepParams> base = frozen_base_params(be, model, state, vocab, true);
  LoraParams params(be, *base, *state.adapters, model.options(), state.weights, state.grads,
                    dropout);
  model.forward_backward(in, params, state.scalars);
  be.tracker().set_phase("optimizer", StepPart::Optimizer);
  if (state.sharded()) {
    Comm& comm = *state.comm;
    comm.set_progress("the optimizer");
    comm.all_reduce(state.scalars, ReduceOp::Sum, "the step's losses").wait();
    comm.all_reduce(state.grads, ReduceOp::Sum, "the adapters' gradients").wait();
  }
  after_backward(be, model, state, t, false);
  after_backward(be, model, state, t, true);
  state.optimizer->step(state.weights, state.grads, state.scalars, lr, t);
}

}  // namespace

void train_step(Backend& be, Gemma4Model& model, TrainState& state, const StepInputs& in, double lr,
                int64_t t, const VocabInputs& vocab) {
  be.tracker().set_phase("step start");
  be.fill({.x = state.grads, .value = 0.0});
  if (state.adapters != nullptr) return lora_train_step(be, model, state, in, lr, t, vocab);
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
                    state.weights, state.grads, vocab, true);
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

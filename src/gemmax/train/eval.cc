#include "gemmax/train/eval.h"

#include <cmath>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"
#include "gemmax/model/lora/lora_params.h"
#include "gemmax/train/step.h"

namespace gemmax {

double EvalResult::avg_perplexity() const { return std::exp(avg_loss()); }

EvalBatchLoss eval_batch(Backend& be, Gemma4Model& model, TrainState& state, const Batch& batch) {
  be.tracker().set_phase("evaluation");
  StepInputs in;
  // The model's weights: the trained ones, or a LoRA run's frozen base (its adapters on top).
  const bool lora = state.adapters != nullptr;
  const ShardLayout& layout = state.model_layout();
  const Tensor& weights = state.model_weights();
  auto forward = [&](StepParams& base) {
    if (!lora) return void(model.forward_only(in, base, state.scalars));
    LoraParams params(be, base, *state.adapters, model.options(), state.weights, Tensor());
    model.forward_only(in, params, state.scalars);
  };
  if (!state.sharded()) {
    in = upload_batch(be, batch);
    if (lora) {
      forward(*frozen_base_params(be, model, state, VocabInputs(), false));
    } else {
      WholeParams params(be, model.params(), model.options(), weights, Tensor());
      forward(params);
    }
  } else {
    Comm& comm = *state.comm;
    const ShardedBatch b =
        upload_sharded_batch(be, comm, layout, state.fsdp, model.options().num_vocab_tiling,
                             model.config().vocab_size, batch);
    in = b.in;
    if (lora) {
      forward(*frozen_base_params(be, model, state, b.vocab, false));
    } else {
      FsdpParams params(be, comm, model.params(), layout, state.fsdp, model.options(), weights,
                        Tensor(), b.vocab, false);
      forward(params);
    }
    comm.all_reduce(state.scalars, ReduceOp::Sum, "the eval batch's losses").wait();
  }
  const Tensor host = be.to_host(state.scalars);
  return {model.losses(host, in), get_as_double(host, StepScalars::kCeSum)};
}

TrainState make_eval_state(Backend& be, const ParamTable& table, DType weight_dtype, Comm* comm,
                           const FsdpOptions& fsdp) {
  TrainState s;
  const bool sharded = comm != nullptr && comm->size() > 1;
  s.layout = sharded ? ShardLayout::fsdp(table, comm->size(), comm->rank(), fsdp.replicate_small)
                     : ShardLayout::whole(table);
  s.comm = sharded ? comm : nullptr;
  s.fsdp = fsdp;
  s.weights = be.alloc({s.layout.local_total}, weight_dtype, MemKind::Params);
  if (sharded) be.fill({.x = s.weights, .value = 0.0});  // the pieces' zero padding
  s.scalars = be.zeros({StepScalars::kCount}, DType::F64, MemKind::Data);
  return s;
}

std::string run_tokenizer_type(const TrainConfig& c) {
  return c.data.dataset_type == DatasetType::Hf ? "auto" : std::string(name_of(c.data.tokenizer_type));
}

DataOptions run_data_options(const TrainConfig& c, int64_t vocab_size, int rank, int ranks) {
  DataOptions d;
  d.dataset_type = name_of(c.data.dataset_type);
  d.dataset_path = c.data.dataset_path;
  d.hf_path = c.data.hf_path;
  d.hf_data_dir = c.data.hf_data_dir;
  d.hf_files = c.data.hf_train_files;
  d.hf_split = c.data.train_split;
  d.data_columns = c.data.train_data_columns;
  d.chat_template_path = c.data.chat_template_path;
  d.chat_template = c.data.chat_template;
  d.model_dir = c.run.load_parameters_path;
  d.tokenizer_type = run_tokenizer_type(c);
  d.tokenizer_path = c.data.tokenizer_path;
  d.packing = c.data.packing;
  d.packing_type = name_of(c.data.grain_packing_type);
  d.shuffle = c.data.enable_data_shuffling;
  d.shuffle_buffer = c.data.grain_shuffle_buffer_size;
  d.hf_datasets_version = int(c.data.hf_datasets_version);
  d.truncate = c.data.use_truncation;
  d.batch = c.step.per_device_batch_size;
  d.seq = c.step.max_target_length;
  d.vocab_size = vocab_size;
  d.seed = uint64_t(c.data.data_shuffle_seed);
  d.completion_only = c.data.sft_train_on_completion_only;
  d.rank = rank;
  d.ranks = ranks;
  return d;
}

DataOptions eval_data_options(const TrainConfig& c, const DataOptions& train) {
  DataOptions o = train;
  o.eval = true;
  const int64_t rows = c.eval.eval_per_device_batch_size;
  if (rows < 0)
    fail("eval_per_device_batch_size must be >= 0 (0: per_device_batch_size), got ", rows);
  if (rows > train.batch)
    fail("eval_per_device_batch_size=", rows, " is above per_device_batch_size=", train.batch,
         ": evaluation runs in the memory a training step plans for; set it to at most ",
         train.batch, " (0: the same)");
  if (rows > 0) o.batch = rows;
  const int64_t tiles = c.step.num_vocab_tiling;
  if (c.parallel.vocab_tiling_axis == VocabTilingAxis::Batch && tiles > 0 && (o.ranks * o.batch) % tiles != 0)
    fail("eval_per_device_batch_size=", o.batch, " x ", o.ranks, " ranks = ", o.ranks * o.batch,
         " eval rows, which num_vocab_tiling=", tiles,
         " does not divide (vocab_tiling_axis=batch tiles the global batch's rows); set "
         "eval_per_device_batch_size to per_device_batch_size (0)");
  const std::string& path = c.eval.eval_dataset_path;
  if (train.dataset_type == "hf" && path.empty()) {
    o.hf_files = c.eval.hf_eval_files;
    o.hf_split = c.eval.hf_eval_split;
    o.data_columns = c.eval.eval_data_columns;
  } else if (!path.empty()) {
    o.dataset_type = "shards";
    o.dataset_path = path;
  } else if (train.dataset_type == "shards") {
    fail("evaluation with dataset_type=shards needs eval_dataset_path: token shards held out "
         "from dataset_path (made by `gemmax tokenize`); or set eval_interval=-1 to train "
         "without evaluation");
  }
  return o;
}

Evaluator::Evaluator(const TrainConfig& c, const DataOptions& train)
    : interval_(c.eval.eval_interval),
      steps_(c.eval.eval_steps),
      target_loss_(c.eval.target_eval_loss) {
  if (interval_ == 0)
    fail("eval_interval must be a number of steps > 0, or -1 (no evaluation); got 0");
  if (steps_ == 0) fail("eval_steps must be > 0, or -1 (the whole eval set); got 0");
  if (target_loss_ < 0 || !std::isfinite(target_loss_))
    fail("target_eval_loss must be >= 0 (0: off), got ", target_loss_);
  data_ = make_data_loader(eval_data_options(c, train));
  start_ = data_->state();
}

EvalResult Evaluator::run(Backend& be, Gemma4Model& model, TrainState& state) {
  data_->restore(start_);
  EvalResult r;
  while ((steps_ < 0 || r.batches < steps_) && !data_->exhausted()) {
    const EvalBatchLoss b = eval_batch(be, model, state, data_->next());
    r.batches += 1;
    r.total_loss += b.ce_sum;
    r.total_weights += b.loss.num_targets;
    r.moe_lb_loss += b.loss.lb_loss;
  }
  // No counted target is no loss at all, not a loss of 0 (perplexity 1, and target_eval_loss
  // would stop the run as converged). The counts are the global batch's: every rank fails.
  if (r.total_weights == 0)
    fail("the evaluation counted no target token in its ", describe(),
         ": its loss masks mark nothing (sft_train_on_completion_only=true with shards whose "
         "masks are all 0), or the eval set is empty; evaluate on shards with completions, set "
         "sft_train_on_completion_only=false, or eval_interval=-1");
  return r;
}

std::unique_ptr<Evaluator> make_evaluator(const TrainConfig& c, const DataOptions& train,
                                          std::vector<std::string>& notes) {
  if (c.eval.eval_interval < 0) return nullptr;
  const bool hf_eval = train.dataset_type == "hf" &&
                       (!c.eval.hf_eval_split.empty() || !c.eval.hf_eval_files.empty());
  if (c.eval.eval_dataset_path.empty() && train.dataset_type != "builtin" && !hf_eval) {
    notes.push_back(str_cat("no evaluation: dataset_type=", train.dataset_type,
                            " has no held-out part; set ",
                            train.dataset_type == "hf" ? "hf_eval_split (or hf_eval_files)"
                                                       : "eval_dataset_path",
                            " to evaluate (or eval_interval=-1 to silence this)"));
    return nullptr;
  }
  auto e = std::make_unique<Evaluator>(c, train);
  const double target = e->target_loss();
  notes.push_back(str_cat("eval every ", c.eval.eval_interval,
                          " steps and at the end: ", e->describe(),
                          target > 0 ? str_cat("; stops at eval loss <= ", target) : ""));
  return e;
}

std::string Evaluator::describe() const {
  return str_cat(steps_ < 0 ? std::string("one pass") : str_cat(steps_, " batches"), " of ",
                 data_->describe());
}

}  // namespace gemmax

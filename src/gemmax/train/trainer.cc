#include "gemmax/train/trainer.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "gemmax/base/convert.h"
#include "gemmax/base/progress.h"
#include "gemmax/base/strings.h"
#include "gemmax/base/timer.h"
#include "gemmax/config/run_config.h"
#include "gemmax/data/tokenizer.h"
#include "gemmax/io/atomic_file.h"
#include "gemmax/io/model_dir.h"
#include "gemmax/io/train_checkpoint.h"
#include "gemmax/model/generate.h"
#include "gemmax/train/flops.h"
#include "gemmax/train/memory_budget.h"
#include "gemmax/train/metrics.h"
#include "gemmax/train/stop_signal.h"

namespace gemmax {
namespace fs = std::filesystem;

namespace {

DataOptions data_options(const Config& c, int64_t vocab) {
  DataOptions d;
  d.dataset_type = c.get_string("dataset_type");
  d.dataset_path = c.get_string("dataset_path");
  d.tokenizer_type = c.get_string("tokenizer_type");
  d.tokenizer_path = c.get_string("tokenizer_path");
  d.packing = c.get_bool("packing");
  d.batch = c.get_int("per_device_batch_size");
  d.seq = c.get_int("max_target_length");
  d.vocab_size = vocab;
  d.seed = uint64_t(c.get_int("data_shuffle_seed"));
  return d;
}

// Keys a resumed run must share with the run that wrote the checkpoint: the network, the
// numerics, what is trained, and the data stream whose position the checkpoint holds. Every
// other key (steps, schedule, logging, checkpointing, remat, tiling) may change on resume.
bool must_match_on_resume(const std::string& key) {
  static const char* kKeys[] = {"dtype",
                                "weight_dtype",
                                "freeze",
                                "per_device_batch_size",
                                "max_target_length",
                                "dataset_type",
                                "dataset_path",
                                "tokenizer_type",
                                "tokenizer_path",
                                "packing",
                                "data_shuffle_seed"};
  for (const char* k : kKeys)
    if (key == k) return true;
  return false;
}

// Copies a checkpoint tensor into a view of one of the run's buffers, checking its shape.
void restore_tensor(Backend& be, const SafetensorsFile& file, const std::string& name,
                    const Tensor& dst) {
  if (!file.has(name)) fail("checkpoint file '", file.path(), "' has no tensor '", name, "'");
  const SafetensorsEntry& e = file.entry(name);
  if (e.shape != dst.shape())
    fail("checkpoint file '", file.path(), "': '", name, "' has shape ", shape_str(e.shape),
         ", the model needs ", shape_str(dst.shape()));
  be.upload(dst, file.read_as(name, dst.dtype()));
}

}  // namespace

Trainer::Trainer(const Config& config) : config_(config) {
  // The memory plan comes first: a run that cannot fit is refused before anything is allocated.
  const MemoryPlanInput plan_in = memory_plan_input(config_);
  if (plan_in.fsdp > 1)
    fail("ici_fsdp_parallelism=", plan_in.fsdp,
         " is not implemented yet for training (one "
         "device only): use it with dry_run=true to plan the memory of a "
         "sharded run, or set "
         "ici_fsdp_parallelism=1");
  backend_ = make_backend(backend_options(config_));
  plan_ = plan_memory(plan_in, *backend_);
  check_memory_limit(config_, plan_);
  const ModelConfig& mc = plan_in.model;
  batch_ = plan_in.batch;
  seq_ = plan_in.seq;
  steps_ = config_.get_int("steps");
  if (steps_ < 0) fail("steps must be >= 0, got ", steps_);
  const DType wdt = plan_in.weight;

  schedule_.peak = config_.get_double("learning_rate");
  const int64_t ns = config_.get_int("learning_rate_schedule_steps");
  schedule_.total_steps = ns < 0 ? steps_ : ns;
  schedule_.warmup_fraction = config_.get_double("warmup_steps_fraction");
  schedule_.final_fraction = config_.get_double("cosine_learning_rate_final_fraction");

  run_dir_ =
      (fs::path(config_.get_string("base_output_directory")) / config_.get_string("run_name"))
          .string();
  checkpoints_dir_ = (fs::path(run_dir_) / "checkpoints").string();

  data_ = make_data_loader(data_options(config_, mc.vocab_size));
  model_ = std::make_unique<Gemma4Model>(mc, *backend_, plan_in.options);
  const ParamTable& table = model_->params();
  trainable_ = trainable_params(table, config_.get_string("freeze"));
  state_ = make_train_state(*backend_, table, trainable_, wdt, AdamWConfig::from(config_));

  // Where the weights come from: the run's own latest checkpoint (resume), else released
  // weights (fine-tuning), else a fresh initialisation.
  const std::vector<CheckpointRef> saved = config_.get_bool("enable_checkpointing")
                                               ? list_train_checkpoints(checkpoints_dir_)
                                               : std::vector<CheckpointRef>();
  if (!saved.empty()) {
    resume_from(open_train_checkpoint(saved.back().dir));
  } else if (!config_.get_string("load_parameters_path").empty()) {
    load_pretrained(config_.get_string("load_parameters_path"));
  } else {
    Tensor host = Tensor::empty({table.total()}, wdt, MemKind::Workspace);
    init_params(table, host, uint64_t(config_.get_int("init_weights_seed")));
    backend_->upload(state_.weights, host);
  }
  prepare_run_dir();
}

Trainer::~Trainer() = default;

void Trainer::resume_from(const TrainCheckpoint& ckpt) {
  const nlohmann::json& saved = ckpt.state.at("config");  // checked by open_train_checkpoint
  const nlohmann::json now = config_.to_json();
  const ModelConfig mine = model_->config();
  // The network: compare through ModelConfig so that the message names the MaxText key.
  const Config saved_config = Config::from_json(saved, ckpt.ref.dir + "/state.json");
  if (const std::string d = model_config_from(saved_config).shape_difference(mine); !d.empty())
    fail("checkpoint '", ckpt.ref.dir, "' is from a different model (", d,
         " in checkpoint vs now); use another run_name or "
         "base_output_directory for a new run");
  std::vector<std::string> changed;
  for (const auto& [key, value] : now.items()) {
    if (!saved.contains(key) || saved[key] == value) continue;
    if (must_match_on_resume(key))
      fail("checkpoint '", ckpt.ref.dir, "' was written with ", key, "=", saved[key].dump(),
           " but this run has ", key, "=", value.dump(),
           "; resuming needs the same value (or use another run_name for a new "
           "run)");
    if (key != "steps") changed.push_back(key + " " + saved[key].dump() + " -> " + value.dump());
  }

  const ParamTable& table = model_->params();
  Progress progress("restoring " + ckpt.ref.dir,
                    double(ckpt.params.file_bytes() - ckpt.params.data_offset() +
                           ckpt.optimizer.file_bytes() - ckpt.optimizer.data_offset()),
                    "bytes");
  for (const ParamSpec& s : table.specs()) {
    restore_tensor(*backend_, ckpt.params, s.name, table.view(state_.weights, s.name));
    progress.add(double(ckpt.params.entry(s.name).nbytes()));
  }
  for (const auto& [name, view] : state_.optimizer->named_state()) {
    restore_tensor(*backend_, ckpt.optimizer, name, view);
    progress.add(double(ckpt.optimizer.entry(name).nbytes()));
  }
  progress.finish();
  data_->restore(ckpt.state.at("data"));
  start_step_ = ckpt.ref.step;
  notes_.push_back(str_cat("resumed from ", ckpt.ref.dir, " (step ", start_step_, ")"));
  for (const std::string& c : changed) notes_.push_back("changed since the checkpoint: " + c);
}

void Trainer::load_pretrained(const std::string& dir) {
  const LoadedModel m = load_model_dir(dir, state_.weights.dtype());
  if (const std::string d = m.config.shape_difference(model_->config()); !d.empty())
    fail("load_parameters_path='", dir,
         "' holds a different model than model_name=", model_->config().name, " (", d,
         " there vs the run's); set model_name or the model keys "
         "to match it");
  backend_->upload(state_.weights, m.weights);
  notes_.push_back("initialised from " + m.source);
  if (!m.note.empty()) notes_.push_back(m.note);
}

void Trainer::prepare_run_dir() {
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec)
    fail("cannot create the run directory '", run_dir_, "': ", ec.message(),
         " (set base_output_directory to a writable folder)");
  write_file_atomic((fs::path(run_dir_) / "config.yml").string(), config_.to_yaml());
  // The metrics hold each completed step of the run once: on resume, drop the steps after the
  // checkpoint (the run is about to redo them).
  drop_metrics_from(metrics_options(config_, run_dir_), start_step_);
}

std::string Trainer::save_checkpoint(int64_t steps_done) {
  const ParamTable& table = model_->params();
  NamedTensors params;
  for (const ParamSpec& s : table.specs())
    params.emplace_back(s.name, backend_->to_host(table.view(state_.weights, s.name)));
  NamedTensors moments;
  for (const auto& [name, view] : state_.optimizer->named_state())
    moments.emplace_back(name, backend_->to_host(view));
  nlohmann::json state;
  state["data"] = data_->state();
  state["config"] = config_.to_json();
  return save_train_checkpoint(checkpoints_dir_, steps_done, params, moments, state,
                               config_.get_int("max_num_checkpoints_to_keep"));
}

void Trainer::skip_or_stop_nonfinite_step(int64_t step, const StepResult& r, TrainSummary& sum,
                                          std::ostream& log) {
  // The update was not applied (AdamW skips a step whose scalars are not finite), so the
  // weights are still those after the previous step. Naming the culprit reads the gradients
  // back, which only this rare path does.
  const double loss = r.loss.total_loss;
  const std::string culprit = state_.optimizer->first_nonfinite_gradient(state_.grads);
  const std::string what = str_cat(
      "step ", step, ": ",
      std::isfinite(loss) ? str_cat("the gradient norm is ", r.raw_grad_norm, " (loss ", loss, ")")
                          : str_cat("the loss is ", loss),
      culprit.empty() ? std::string()
                      : "; the first parameter with a non-finite gradient is " + culprit,
      "; the update was not applied");
  const char* abort_key =
      std::isnan(loss) && config_.get_bool("abort_on_nan_loss")   ? "abort_on_nan_loss"
      : std::isinf(loss) && config_.get_bool("abort_on_inf_loss") ? "abort_on_inf_loss"
                                                                  : nullptr;
  const int64_t allowed = config_.get_int("skip_nonfinite_steps");
  if (abort_key == nullptr && sum.skipped_steps < allowed) {
    sum.skipped_steps += 1;
    log << "gemmax: " << what << "; step skipped (" << sum.skipped_steps
        << " of skip_nonfinite_steps=" << allowed << ")" << std::endl;
    return;
  }
  fail(what,
       abort_key != nullptr ? str_cat(" (", abort_key, "=true)")
                            : str_cat(" (", sum.skipped_steps, " such steps skipped already, ",
                                      "skip_nonfinite_steps=", allowed, ")"),
       "; the run stops",
       sum.last_checkpoint.empty() ? std::string()
                                   : "; its last checkpoint is " + sum.last_checkpoint,
       ". Lower learning_rate, check the data, or set skip_nonfinite_steps to skip such steps");
}

std::string Trainer::save_checkpoint_or_die(const StopSignal& stop, int64_t steps_done,
                                            std::ostream& log) {
  std::string dir;
  {
    const StopSignal::Saving saving;
    try {
      dir = save_checkpoint(steps_done);
    } catch (const Error& e) {
      if (!stop.forced()) throw;
      log << "gemmax: forced stop (Ctrl-C twice) while saving step " << steps_done
          << ": that checkpoint was abandoned and removed; the previous one (if any) is intact"
          << std::endl;
      StopSignal::die_by_forced_stop();
    }
  }
  // A forced stop that came after the save's last write: the checkpoint is complete.
  if (stop.forced()) {
    log << "gemmax: forced stop (Ctrl-C twice) after saving " << dir << std::endl;
    StopSignal::die_by_forced_stop();
  }
  return dir;
}

void Trainer::print_sample(std::ostream& log) const {
  const int64_t n = config_.get_int("sample_max_new_tokens");
  if (n <= 0 || config_.get_string("dataset_type") == "synthetic") return;
  const auto tokenizer =
      make_tokenizer(config_.get_string("tokenizer_type"), config_.get_string("tokenizer_path"));
  SampleOptions opts;
  opts.max_new_tokens = n;
  opts.temperature = 0.7;
  opts.top_k = 40;
  const Generation g =
      generate(*model_, state_.weights, *tokenizer, config_.get_string("sample_prompt"), opts);
  log << "gemmax: sample (temperature 0.7, top_k 40): " << g.prompt_text << g.completion << "\n";
}

void Trainer::print_header(std::ostream& log) const {
  const ModelConfig& c = model_->config();
  const StepFlops f = training_flops(c, batch_, seq_);
  log << "gemmax: model " << c.name << " | " << c.num_layers << " layers (" << c.num_global_layers()
      << " global) | d_model " << c.d_model << " | " << c.num_experts << " experts top-"
      << c.num_experts_per_tok << " | vocab " << c.vocab_size << "\n";
  int64_t trained = 0;
  for (size_t i = 0; i < trainable_.size(); ++i)
    trained += trainable_[i] ? model_->params().specs()[i].numel() : 0;
  log << "gemmax: parameters " << format_count(double(model_->params().total())) << " total, "
      << format_count(double(model_->params().active())) << " active per token";
  if (trained != model_->params().total())
    log << ", " << format_count(double(trained)) << " trained (freeze='"
        << config_.get_string("freeze") << "')";
  log << "\n";
  log << "gemmax: per step " << batch_ << " x " << seq_ << " tokens | " << std::setprecision(4)
      << f.total() / 1e12 << " TFLOP (learnable " << 3 * f.learnable / 1e12 << ", attention "
      << 3 * f.attention / 1e12 << ")\n";
  log << "gemmax: backend " << backend_->describe() << " | dtype " << config_.get_string("dtype")
      << " | remat " << config_.get_string("remat_policy") << " | data " << data_->describe()
      << "\n";
  log << "gemmax: " << format_memory_plan(plan_);
  for (const std::string& n : notes_) log << "gemmax: " << n << "\n";
  log << "gemmax: run directory " << run_dir_ << "\n";
}

TrainSummary Trainer::run(std::ostream& log) {
  print_header(log);
  TrainSummary sum;
  sum.final_step = start_step_;
  if (start_step_ >= steps_) {
    log << "gemmax: nothing to do: the run already completed " << start_step_
        << " steps (steps=" << steps_ << ")\n";
    return sum;
  }
  // Measured peaks cover the steps only (setup's transients, e.g. initialisation, are not part
  // of the plan). The tracker is process-wide: other live models would count too.
  MemoryTracker::global().reset_peaks();
  MetricsSink metrics(metrics_options(config_, run_dir_), log);
  const double step_tflop = training_flops(model_->config(), batch_, seq_).total() / 1e12;
  const double peak = config_.get_double("peak_tflops_per_device");
  const bool checkpointing = config_.get_bool("enable_checkpointing");
  const int64_t period = config_.get_int("checkpoint_period");
  const StopSignal stop;
  double timed_seconds = 0;
  for (int64_t step = start_step_; step < steps_; ++step) {
    Timer timer;
    const Batch batch = data_->next();
    const StepInputs in = upload_batch(*backend_, batch);
    const double lr = schedule_.at(step);
    train_step(*backend_, *model_, state_, in, lr, step + 1);
    const StepResult r = read_step(*backend_, *model_, state_, in);  // the step's one read
    const LossInfo& loss = r.loss;
    if (!r.applied) skip_or_stop_nonfinite_step(step, r, sum, log);

    StepMetrics m;
    m.step = step;
    m.loss = loss.total_loss;
    m.lm_loss = loss.ce_loss;
    m.lb_loss = loss.lb_loss;
    m.grad_norm = r.grad_norm;
    m.raw_grad_norm = r.raw_grad_norm;
    m.learning_rate = lr;
    m.step_seconds = timer.seconds();
    m.tokens_per_sec = double(batch_ * seq_) / m.step_seconds;
    m.tflops_per_sec = step_tflop / m.step_seconds;
    m.mfu = peak > 0 ? m.tflops_per_sec / peak : 0.0;
    m.total_weights = loss.num_targets;
    m.skipped_steps = sum.skipped_steps;
    metrics.write(m, step + 1 == steps_);

    if (sum.steps == 0)
      sum.first_loss = m.loss;
    else
      timed_seconds += m.step_seconds;
    sum.last_loss = m.loss;
    sum.steps += 1;
    sum.final_step = step + 1;

    // One read of the stop request decides this step's save. A request that arrives during a
    // save (or after a step that saved) stops the run at once: the checkpoint holds this step.
    const int64_t done = step + 1;
    const int requested = stop.received();
    bool saved = false;
    if (checkpointing && ((period > 0 && done % period == 0) || done == steps_ || requested)) {
      sum.last_checkpoint = save_checkpoint_or_die(stop, done, log);
      saved = true;
      log << "gemmax: saved checkpoint " << sum.last_checkpoint << std::endl;
    }
    sum.stop_signal = (requested != 0 || saved) && done < steps_ ? stop.received() : 0;
    if (sum.stop_signal) break;
  }
  if (sum.stop_signal) {
    log << "gemmax: stopped by " << StopSignal::name(sum.stop_signal) << " after step "
        << sum.final_step << "; "
        << (checkpointing ? "checkpoint saved in " + sum.last_checkpoint +
                                "; run the same command again to resume"
                          : std::string("enable_checkpointing=false: nothing was saved"))
        << std::endl;
  }
  const int64_t timed = sum.steps - 1;
  if (timed > 0) {
    sum.mean_step_seconds = timed_seconds / double(timed);
    sum.tokens_per_sec = double(batch_ * seq_) / sum.mean_step_seconds;
    sum.tflops_per_sec = step_tflop / sum.mean_step_seconds;
  }
  const auto& mem = MemoryTracker::global();
  log << "gemmax: done: " << sum.steps << " steps (run at step " << sum.final_step << ") | loss "
      << std::setprecision(4) << sum.first_loss << " -> " << sum.last_loss << " | mean step "
      << sum.mean_step_seconds << " s | " << std::setprecision(6) << sum.tokens_per_sec
      << " tokens/s | " << sum.tflops_per_sec << " TFLOP/s | peak memory "
      << format_bytes(double(mem.peak_total())) << "\n";
  log << "gemmax: " << format_memory_plan(plan_, &mem);
  std::ofstream(fs::path(run_dir_) / "memory.json") << memory_json(plan_, mem).dump(2) << "\n";
  log << "gemmax: " << metrics.describe() << "\n";
  if (!stop.received()) print_sample(log);  // a run asked to stop ends promptly
  return sum;
}

}  // namespace gemmax

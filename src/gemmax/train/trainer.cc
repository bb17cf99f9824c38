#include "gemmax/train/trainer.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gemmax/base/timer.h"
#include "gemmax/config/run_config.h"
#include "gemmax/train/flops.h"
#include "gemmax/train/memory_budget.h"
#include "gemmax/train/metrics.h"

namespace gemmax {
namespace fs = std::filesystem;

namespace {

std::string human_count(double n) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  if (n >= 1e9) os << n / 1e9 << "B";
  else if (n >= 1e6) os << n / 1e6 << "M";
  else if (n >= 1e3) os << n / 1e3 << "K";
  else os << std::setprecision(0) << n;
  return os.str();
}

std::string human_bytes(double b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1);
  if (b >= 1ull << 30) os << b / double(1ull << 30) << " GiB";
  else os << b / double(1ull << 20) << " MiB";
  return os.str();
}

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

}  // namespace

Trainer::Trainer(const Config& config) : config_(config) {
  // The memory plan comes first: a run that cannot fit is refused before anything is allocated.
  const MemoryPlanInput plan_in = memory_plan_input(config_);
  if (plan_in.fsdp > 1)
    fail("ici_fsdp_parallelism=", plan_in.fsdp, " is not implemented yet for training (one "
         "device only): use it with dry_run=true to plan the memory of a sharded run, or set "
         "ici_fsdp_parallelism=1");
  plan_ = plan_memory(plan_in);
  check_memory_limit(config_, plan_);
  const ModelConfig& mc = plan_in.model;
  batch_ = plan_in.batch;
  seq_ = plan_in.seq;
  steps_ = config_.get_int("steps");
  if (steps_ < 0) fail("steps must be >= 0, got ", steps_);

  ModelOptions opts;
  opts.act = plan_in.act;
  opts.remat = plan_in.remat;
  opts.num_vocab_tiling = plan_in.num_vocab_tiling;
  const DType wdt = plan_in.weight;

  schedule_.peak = config_.get_double("learning_rate");
  const int64_t ns = config_.get_int("learning_rate_schedule_steps");
  schedule_.total_steps = ns < 0 ? steps_ : ns;
  schedule_.warmup_fraction = config_.get_double("warmup_steps_fraction");
  schedule_.final_fraction = config_.get_double("cosine_learning_rate_final_fraction");

  backend_ = make_backend(config_.get_string("backend"));
  data_ = make_data_loader(data_options(config_, mc.vocab_size));
  model_ = std::make_unique<Gemma4Model>(mc, *backend_, opts);
  const int64_t n = model_->params().total();
  Tensor host = Tensor::empty({n}, wdt, MemKind::Workspace);
  init_params(model_->params(), host, uint64_t(config_.get_int("init_weights_seed")));
  weights_ = backend_->alloc({n}, wdt, MemKind::Params);
  backend_->copy(weights_, backend_->to_device(host, MemKind::Workspace));
  grads_ = backend_->alloc({n}, wdt, MemKind::Grads);
  optimizer_ = std::make_unique<AdamW>(*backend_, n, wdt, AdamWConfig::from(config_));

  run_dir_ = (fs::path(config_.get_string("base_output_directory")) / config_.get_string("run_name")).string();
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec) fail("cannot create the run directory '", run_dir_, "': ", ec.message(),
               " (set base_output_directory to a writable folder)");
  std::ofstream(fs::path(run_dir_) / "config.json") << config_.to_json().dump(2) << "\n";
}

Trainer::~Trainer() = default;

void Trainer::print_header(std::ostream& log) const {
  const ModelConfig& c = model_->config();
  const StepFlops f = training_flops(c, batch_, seq_);
  log << "gemmax: model " << c.name << " | " << c.num_layers << " layers ("
      << c.num_global_layers() << " global) | d_model " << c.d_model << " | " << c.num_experts
      << " experts top-" << c.num_experts_per_tok << " | vocab " << c.vocab_size << "\n";
  log << "gemmax: parameters " << human_count(double(model_->params().total())) << " total, "
      << human_count(double(model_->params().active())) << " active per token\n";
  log << "gemmax: per step " << batch_ << " x " << seq_ << " tokens | "
      << std::setprecision(4) << f.total() / 1e12 << " TFLOP (learnable "
      << 3 * f.learnable / 1e12 << ", attention " << 3 * f.attention / 1e12 << ")\n";
  log << "gemmax: backend " << backend_->name() << " | dtype " << config_.get_string("dtype")
      << " | remat " << config_.get_string("remat_policy") << " | data " << data_->describe()
      << "\n";
  log << "gemmax: " << format_memory_plan(plan_);
  log << "gemmax: run directory " << run_dir_ << "\n";
}

TrainSummary Trainer::run(std::ostream& log) {
  print_header(log);
  // Measured peaks cover the steps only (setup's transients, e.g. initialisation, are not part
  // of the plan). The tracker is process-wide: other live models would count too.
  MemoryTracker::global().reset_peaks();
  MetricsWriter metrics((fs::path(run_dir_) / "metrics.jsonl").string());
  const double step_tflop = training_flops(model_->config(), batch_, seq_).total() / 1e12;
  const double peak = config_.get_double("peak_tflops_per_device");
  const int64_t log_period = std::max<int64_t>(1, config_.get_int("log_period"));
  TrainSummary sum;
  double timed_seconds = 0;
  for (int64_t step = 0; step < steps_; ++step) {
    Timer timer;
    const Batch batch = data_->next();
    const StepInputs in = upload_batch(*backend_, batch);
    backend_->fill(grads_, 0.0);
    const LossInfo loss = model_->forward_backward(in, weights_, grads_);
    if (std::isnan(loss.total_loss) && config_.get_bool("abort_on_nan_loss"))
      fail("loss is NaN at step ", step, " (abort_on_nan_loss=true); lower learning_rate?");
    if (std::isinf(loss.total_loss) && config_.get_bool("abort_on_inf_loss"))
      fail("loss is infinite at step ", step, " (abort_on_inf_loss=true)");
    const double lr = schedule_.at(step);
    const GradNorms norms = optimizer_->step(weights_, grads_, lr, step + 1);

    StepMetrics m;
    m.step = step;
    m.loss = loss.total_loss;
    m.lm_loss = loss.ce_loss;
    m.lb_loss = loss.lb_loss;
    m.grad_norm = norms.clipped;
    m.raw_grad_norm = norms.raw;
    m.learning_rate = lr;
    m.step_seconds = timer.seconds();
    m.tokens_per_sec = double(batch_ * seq_) / m.step_seconds;
    m.tflops_per_sec = step_tflop / m.step_seconds;
    m.mfu = peak > 0 ? m.tflops_per_sec / peak : 0.0;
    m.total_weights = loss.num_targets;
    metrics.write(m);
    if (step % log_period == 0 || step + 1 == steps_) log << format_step_line(m) << std::endl;

    if (step == 0) sum.first_loss = m.loss;
    else timed_seconds += m.step_seconds;
    sum.last_loss = m.loss;
    sum.steps = step + 1;
  }
  const int64_t timed = sum.steps - 1;
  if (timed > 0) {
    sum.mean_step_seconds = timed_seconds / double(timed);
    sum.tokens_per_sec = double(batch_ * seq_) / sum.mean_step_seconds;
    sum.tflops_per_sec = step_tflop / sum.mean_step_seconds;
  }
  const auto& mem = MemoryTracker::global();
  log << "gemmax: done: " << sum.steps << " steps | loss " << std::setprecision(4)
      << sum.first_loss << " -> " << sum.last_loss << " | mean step " << sum.mean_step_seconds
      << " s | " << std::setprecision(6) << sum.tokens_per_sec << " tokens/s | "
      << sum.tflops_per_sec << " TFLOP/s | peak memory " << human_bytes(double(mem.peak_total()))
      << "\n";
  log << "gemmax: " << format_memory_plan(plan_, &mem);
  std::ofstream(fs::path(run_dir_) / "memory.json") << memory_json(plan_, mem).dump(2) << "\n";
  log << "gemmax: metrics in " << metrics.path() << "\n";
  return sum;
}

}  // namespace gemmax

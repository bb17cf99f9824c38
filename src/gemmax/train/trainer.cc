#include "gemmax/train/trainer.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda_module.h"
#include "gemmax/base/convert.h"
#include "gemmax/base/crc32c.h"
#include "gemmax/base/progress.h"
#include "gemmax/base/strings.h"
#include "gemmax/base/timer.h"
#include "gemmax/checkpoint/hf_model.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/checkpoint/peft_adapter.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/config/run_config.h"
#include "gemmax/data/tokenizer.h"
#include "gemmax/io/atomic_file.h"
#include "gemmax/io/hf_config.h"
#include "gemmax/io/run_lock.h"
#include "gemmax/model/generate.h"
#include "gemmax/parallel/comm_nccl.h"
#include "gemmax/parallel/routing_comm.h"
#include "gemmax/parallel/world.h"
#include "gemmax/train/eval.h"
#include "gemmax/train/flops.h"
#include "gemmax/train/lora_setup.h"
#include "gemmax/train/memory_budget.h"
#include "gemmax/train/metrics.h"
#include "gemmax/train/run_outputs.h"
#include "gemmax/train/stop_signal.h"

namespace gemmax {
namespace fs = std::filesystem;

namespace {

// The comm of a cuda backend's device buffers: NCCL on its streams, bootstrapped over `host`.
std::unique_ptr<Comm> make_device_comm(Comm& host, Backend& be, int device) {
  return make_nccl_comm(host, device, cuda::compute_stream(be), cuda::comm_stream(be));
}

// Keys a resumed run must share with the run that wrote the checkpoint: the network, the
// numerics, what is trained, and the data stream whose position the checkpoint holds (with the
// global batch, per_device_batch_size x ranks, checked apart). Every other key (steps, schedule,
// logging, checkpointing, remat, tiling, the sharding switches) may change on resume.
bool must_match_on_resume(const std::string& key) {
  static const char* kKeys[] = {
      "dtype",        "weight_dtype",   "freeze",         "max_target_length", "dataset_type",
      "dataset_path", "tokenizer_type", "tokenizer_path", "packing",           "data_shuffle_seed",
      "grain_packing_type", "enable_data_shuffling", "grain_shuffle_buffer_size", "use_truncation",
      "hf_datasets_version",
      "embedding_table",
      // A LoRA run's adapters are what its checkpoint holds: their shape and targets stay.
      "enable_lora", "lora_rank", "lora_alpha", "lora_module_path", "lora_target_modules",
      "lora_target_parameters", "use_rslora", "lora_weight_qtype", "lora_tile_size",
      "lora_restore_path", "hf_lora_adapter_path"};
  for (const char* k : kKeys)
    if (key == k) return true;
  return false;
}

// What a checkpoint written before `key` existed ran with, where that differs from the key's
// default now (null: the checkpoint's run had today's default, or the key does not matter).
nlohmann::json value_before_the_key(const std::string& key) {
  if (key == "embedding_table") return "hf";  // before the key, Adam trained HF's table
  return nullptr;
}

}  // namespace

int Trainer::agreed_stop_signal(const StopSignal& stop, const char* what) const {
  return agreed_signal(stop.received(), what);
}

int Trainer::agreed_signal(int signal, const char* what) const {
  if (comm_->size() > 1) {
    Tensor sig = control_buffer({1}, DType::I32);
    sig.data<int32_t>()[0] = signal;
    comm_->all_reduce(sig, ReduceOp::Max, what).wait();
    signal = sig.data<int32_t>()[0];
  }
  return signal;
}

Trainer::Trainer(const Config& config, Comm* comm, TrainHooks hooks)
    : config_(config), cfg_(train_config_from(config)), hooks_(std::move(hooks)), comm_(comm) {
  if (comm_ == nullptr) {
    own_comm_ = std::make_unique<SingleComm>();
    comm_ = own_comm_.get();
  }
  const int ranks = comm_->size();
  if (ranks > 1) {
    comm_->set_timeout(cfg_.parallel.comm_timeout_seconds);
    comm_->set_progress("setup");
    check_same_config(*comm_, config_.to_json());
  }
  if (hooks_.at_start) hooks_.at_start();
  // A shape that trains must export: refused here, before anything is trained.
  if (const ModelConfig m = model_config_from(config_); !hf_export_refusal(m).empty())
    fail("model '", m.name, "' cannot be trained: ", hf_export_refusal(m),
         " (what gemmax trains must export to a Hugging Face folder that transformers loads)");
  // Several GPUs: each rank takes its own device before its backend is made.
  const bool device_comm = ranks > 1 && cfg_.backend.backend == BackendKind::Cuda;
  const int device = device_comm ? cuda::use_device_of_rank(comm_->rank()) : 0;
  // The memory plan comes first: a run that cannot fit is refused before anything is allocated.
  const MemoryPlanInput plan_in = memory_plan_input(cfg_, ranks);
  if (ranks == 1 && plan_in.fsdp > 1)
    fail("ici_fsdp_parallelism=", plan_in.fsdp, " needs ", plan_in.fsdp,
         " ranks: start them with `mpirun -np ", plan_in.fsdp,
         " gemmax train ...` (docs/FSDP.md), plan one with dry_run=true, or set "
         "ici_fsdp_parallelism=-1");
  if (ranks > 1 && plan_in.fsdp != ranks)
    fail("ici_fsdp_parallelism=", plan_in.fsdp, " but the run was started with ", ranks,
         " ranks: set it to ", ranks, " or -1 (the started ranks)");
  backend_ = make_backend(backend_options(cfg_));
  if (device_comm) {  // device buffers over NCCL on the backend's streams, host ones over MPI
    routed_comm_ =
        std::make_unique<DeviceRoutingComm>(*comm_, make_device_comm(*comm_, *backend_, device));
    comm_ = routed_comm_.get();
    comm_->set_timeout(cfg_.parallel.comm_timeout_seconds);
  }
  plan_ = plan_memory(plan_in, *backend_);
  check_memory_limit(cfg_, plan_);
  check_fits_this_machine(cfg_, plan_);
  const ModelConfig& mc = plan_in.model;
  batch_ = plan_in.batch;
  seq_ = plan_in.seq;
  steps_ = cfg_.run.steps;
  if (steps_ < 0) fail("steps must be >= 0, got ", steps_);
  const DType wdt = plan_in.weight;

  const RunConfig& run = cfg_.run;
  schedule_.peak = run.learning_rate;
  const int64_t ns = run.learning_rate_schedule_steps;
  schedule_.total_steps = ns < 0 ? steps_ : ns;
  schedule_.warmup_fraction = run.warmup_steps_fraction;
  schedule_.final_fraction = run.cosine_learning_rate_final_fraction;

  run_dir_ = (fs::path(run.base_output_directory) / run.run_name).string();
  checkpoints_dir_ = (fs::path(run_dir_) / "checkpoints").string();
  // Nothing is read or written before the paths are checked and the run folder is ours.
  refuse_run_outputs_over_inputs(cfg_, run_dir_);

  const DataOptions train_data =
      run_data_options(cfg_, mc.vocab_size, comm_->rank(), comm_->size());
  data_ = make_data_loader(train_data);
  check_sample_tokenizer(mc.vocab_size);
  eval_ = make_evaluator(cfg_, train_data, notes_);
  const AllocationScope what("the model's weights, gradients and Adam moments (model_name " +
                             mc.name + ", its model keys, weight_dtype)");
  model_ = std::make_unique<Gemma4Model>(mc, *backend_, plan_in.options);
  const ParamTable& table = model_->params();
  if (plan_in.lora) {
    adapters_ = std::make_unique<AdapterTable>(table, *plan_in.lora);
    trainable_.assign(adapters_->params().specs().size(), true);
    state_ = make_lora_train_state(*backend_, table, *adapters_, plan_in.options.act, wdt,
                                   AdamWConfig::from(cfg_.optimizer), comm_, plan_in.fsdp_options,
                                   plan_in.lora->qtype, plan_in.lora->nf4_block);
    state_.dropout_seed = uint64_t(run.init_weights_seed) * 0x9E3779B97F4A7C15ull + 0x4c6f5241ull;
  } else {
    trainable_ = trainable_params(table, run.freeze);
    state_ = make_train_state(*backend_, table, trainable_, wdt, AdamWConfig::from(cfg_.optimizer),
                              comm_, plan_in.fsdp_options);
  }
  state_.hooks = &hooks_;

  // From here a stop request waits for the weights to load (and then ends the run, writing
  // nothing), so that the lock taken below is always released and its folder left as found.
  const StopSignal::Loading loading;
  // The run folder is this run's from here on (its checkpoints are read, its files written).
  if (rank0()) {
    run_lock_ = std::make_unique<RunDirLock>(run_dir_);
    if (!run_lock_->recovered().empty()) notes_.push_back(run_lock_->recovered());
  }
  // The kind named that MaxText's HF pipeline does not read (run_tokenizer_type): said once.
  if (const std::string named(name_of(cfg_.data.tokenizer_type));
      cfg_.data.dataset_type == DatasetType::Hf && named != "auto" &&
      !cfg_.data.tokenizer_path.empty())
    if (const std::string kind = tokenizer_kind("auto", cfg_.data.tokenizer_path); kind != named)
      notes_.push_back(str_cat("tokenizer_type=", named,
                               " does not apply to dataset_type=hf (MaxText's HF pipeline loads "
                               "tokenizer_path with AutoTokenizer): tokenizer_path is read as the ",
                               kind, " file it is"));

  // Where the weights come from: the run's own latest checkpoint (resume), else released
  // weights (fine-tuning), else a fresh initialisation. Rank 0 picks the checkpoint for all.
  int64_t resume_step = -1;
  if (cfg_.checkpoint.enable_checkpointing) {
    const std::vector<CheckpointRef> saved =
        rank0() ? list_train_checkpoints(checkpoints_dir_) : std::vector<CheckpointRef>();
    Tensor step = control_buffer({1}, DType::I64);
    step.data<int64_t>()[0] = saved.empty() ? -1 : saved.back().step;
    comm_->broadcast(step, 0, "the checkpoint to resume from").wait();
    resume_step = step.data<int64_t>()[0];
  }
  if (hooks_.while_loading) hooks_.while_loading();
  if (resume_step >= 0) {
    const std::vector<CheckpointRef> saved = list_train_checkpoints(checkpoints_dir_);
    std::string dir;
    for (const CheckpointRef& r : saved)
      if (r.step == resume_step) dir = r.dir;
    if (dir.empty())
      fail("rank ", comm_->rank(), " does not see checkpoint step ", resume_step, " in '",
           checkpoints_dir_, "' that rank 0 resumes from: the ranks must share the output folder");
    if (adapters_) load_lora_base();
    resume_from(open_train_checkpoint(dir));
  } else if (adapters_) {
    load_lora_base();
    start_adapters();
  } else if (!run.load_parameters_path.empty()) {
    load_pretrained(run.load_parameters_path);
  } else {
    initialise();
  }
  stopped_while_loading_ = agreed_signal(StopSignal::requested_before_start(), "the start");
  if (stopped_while_loading_) return;  // nothing written: run() says so
  if (rank0()) prepare_run_dir();
  comm_->barrier("the run folder");
}

void Trainer::initialise() {
  const ParamTable& table = model_->params();
  const uint64_t seed = uint64_t(cfg_.run.init_weights_seed);
  Tensor host = Tensor::zeros({state_.layout.local_total}, state_.weights.dtype());
  if (!state_.sharded()) {
    init_params(table, host, seed);
  } else {
    // Each rank generates its own pieces: the values a whole initialisation gives them.
    for (size_t i = 0; i < table.specs().size(); ++i) {
      const ParamPiece& p = state_.layout.pieces[i];
      if (p.count > 0)
        init_param_range(table, table.specs()[i], p.begin, host.flat_slice(p.local, {p.count}),
                         seed);
    }
  }
  backend_->upload(state_.weights, host);
}

void Trainer::load_lora_base() {
  const std::string& dir = cfg_.run.load_parameters_path;
  const ParamTable& table = model_->params();
  const DType dt = model_->options().act;  // the base's compute dtype (NF4's dense part too)
  if (state_.base.nf4) return load_nf4_base();
  // A host backend holding the whole base in host memory: filled in place, without a second
  // copy of the model (which would double the memory a large base takes while it loads).
  const Tensor& dst = state_.base.weights;
  const bool in_place = dst.defined() && !state_.base.layout.sharded() &&
                        backend_->to_host(dst).shares_storage(dst);
  const bool hf = !dir.empty() && std::filesystem::exists(fs::path(dir) / "config.json") &&
                  !std::filesystem::exists(fs::path(dir) / "checkpoints");
  Tensor full;
  if (dir.empty()) {
    full = in_place ? dst : Tensor::zeros({table.total()}, dt);
    init_params(table, full, uint64_t(cfg_.run.init_weights_seed));
    base_source_ = str_cat("model_name=", table.config().name,
                           " initialised with init_weights_seed=", cfg_.run.init_weights_seed);
    notes_.push_back(
        "LoRA on a base initialised from scratch (no load_parameters_path): "
        "the adapters learn on top of random weights");
  } else if (in_place && hf) {
    const HfModelFolder folder = read_hf_model_folder(dir);
    if (const std::string d = folder.config.shape_difference(model_->config()); !d.empty())
      fail("load_parameters_path='", dir, "' holds a different model than model_name=",
           model_->config().name, " (", d, " there vs the run's); set model_name or the model "
           "keys to match it");
    full = dst;
    const std::string note = load_hf_weights(table, folder, full);
    base_source_ = dir;
    base_prefix_ = folder.info.weight_prefix;
    notes_.push_back("frozen base from Hugging Face folder '" + dir + "'");
    if (!note.empty()) notes_.push_back(note);
  } else {
    const LoadedModel m = load_model_dir(dir, dt);
    if (const std::string d = m.config.shape_difference(model_->config()); !d.empty())
      fail("load_parameters_path='", dir,
           "' holds a different model than model_name=", model_->config().name, " (", d,
           " there vs the run's); set model_name or the model "
           "keys to match it");
    full = merged_weights(m);  // another LoRA run's checkpoint: its adapters folded in
    base_source_ = dir;
    base_prefix_ = m.hf_prefix;
    notes_.push_back("frozen base from " + m.source);
    if (!m.note.empty()) notes_.push_back(m.note);
  }
  base_crc_ = crc32c(full.raw(), full.nbytes());
  if (!full.shares_storage(dst)) upload_weights(*backend_, table, state_, full);
}

// QLoRA: the base quantised tensor by tensor as it is read or drawn, never whole in memory; its
// CRC-32C chained over the tensors in registry order (that of the whole buffer).
void Trainer::load_nf4_base() {
  const std::string& dir = cfg_.run.load_parameters_path;
  const ParamTable& table = model_->params();
  const DType dt = model_->options().act;
  Nf4Filler fill(*backend_, table, *state_.base.nf4);
  uint32_t crc = 0;
  auto take = [&](const ParamSpec& s, const Tensor& v) {
    crc = crc32c(v.raw(), v.nbytes(), crc);
    fill.put(s, v);
  };
  const bool hf = !dir.empty() && fs::exists(fs::path(dir) / "config.json") &&
                  !fs::exists(fs::path(dir) / "checkpoints");
  if (dir.empty()) {
    for (const ParamSpec& s : table.specs()) {
      // A table that stays in the compute dtype is drawn where it lives.
      const Tensor in_place = fill.dense_view(s);
      Tensor v = in_place.defined() && in_place.dtype() == dt ? in_place
                                                              : Tensor::empty({s.numel()}, dt);
      init_param_range(table, s, 0, v, uint64_t(cfg_.run.init_weights_seed));
      take(s, v);
    }
    base_source_ = str_cat("model_name=", table.config().name,
                           " initialised with init_weights_seed=", cfg_.run.init_weights_seed);
  } else if (hf) {
    const HfModelFolder folder = read_hf_model_folder(dir);
    if (const std::string d = folder.config.shape_difference(model_->config()); !d.empty())
      fail("load_parameters_path='", dir, "' holds a different model than model_name=",
           model_->config().name, " (", d, " there vs the run's); set model_name or the model "
           "keys to match it");
    if (const std::string note = for_each_hf_weight(table, folder, dt, take); !note.empty())
      notes_.push_back(note);
    base_source_ = dir;
    base_prefix_ = folder.info.weight_prefix;
  } else {  // a run's checkpoint (another LoRA run's adapters folded in)
    const LoadedModel m = load_model_dir(dir, dt);
    if (const std::string d = m.config.shape_difference(model_->config()); !d.empty())
      fail("load_parameters_path='", dir, "' holds a different model than model_name=",
           model_->config().name, " (", d, " there vs the run's)");
    const Tensor full = merged_weights(m);
    for (const ParamSpec& s : table.specs()) take(s, full.flat_slice(s.offset, {s.numel()}));
    base_source_ = dir;
    base_prefix_ = m.hf_prefix;
  }
  fill.finish();
  base_crc_ = crc;
  notes_.push_back("frozen base from " + (dir.empty() ? base_source_ : "'" + dir + "'") +
                   ", its matrices quantised to NF4 as they were read");
}

void Trainer::start_adapters() {
  const ParamTable& trained = adapters_->params();
  const std::string source = lora_adapter_source(cfg_.lora);
  if (!source.empty()) {
    const PeftAdapter a = read_peft_adapter(source, model_->params(), state_.weights.dtype());
    backend_->upload(state_.weights, a.weights);
    notes_.push_back("adapters from the PEFT folder '" + source + "'");
    if (!a.base_model.empty() && a.base_model != base_source_)
      notes_.push_back(str_cat("the adapter was made on base_model_name_or_path '", a.base_model,
                               "'; its shapes fit this run's base '", base_source_, "'"));
    return;
  }
  Tensor host = Tensor::zeros({trained.total()}, state_.weights.dtype());
  init_params(trained, host, uint64_t(cfg_.run.init_weights_seed));
  backend_->upload(state_.weights, host);
}

void Trainer::write_adapter_folder() {
  const fs::path dir = fs::path(run_dir_) / "adapter", tmp = fs::path(run_dir_) / "adapter.tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  write_peft_adapter(tmp.string(), *adapters_, backend_->to_host(state_.weights), base_source_,
                     base_prefix_);
  fs::remove_all(dir, ec);
  fs::rename(tmp, dir);
}

Trainer::~Trainer() = default;

void Trainer::resume_from(const TrainCheckpoint& ckpt) {
  const nlohmann::json& saved = ckpt.state.at("config");  // checked by open_train_checkpoint
  const nlohmann::json now = config_.to_json();
  // A LoRA checkpoint holds the adapters; the base must be the one they were trained on.
  if (adapters_ && ckpt.state.contains("lora") &&
      ckpt.state["lora"].value("base_crc32c", uint32_t(0)) != base_crc_)
    fail("checkpoint '", ckpt.ref.dir, "' holds adapters trained on the base '",
         ckpt.state["lora"].value("base_source", std::string()), "', but this run's base '",
         base_source_,
         "' has other weights (their CRC-32C differs): the adapters would compute "
         "another model; point load_parameters_path at that base, or use another run_name");
  const ModelConfig mine = model_->config();
  // The network: compare through ModelConfig so that the message names the MaxText key.
  const Config saved_config = Config::from_json(saved, ckpt.ref.dir + "/state.json");
  if (const std::string d = model_config_from(saved_config).shape_difference(mine); !d.empty())
    fail("checkpoint '", ckpt.ref.dir, "' is from a different model (", d,
         " in checkpoint vs now); use another run_name or "
         "base_output_directory for a new run");
  std::vector<std::string> changed;
  for (const auto& [key, value] : now.items()) {
    const nlohmann::json was = saved.contains(key) ? saved[key] : value_before_the_key(key);
    if (was.is_null() || was == value) continue;
    // tokenizer_type auto (the default since tokenizer.json) is the kind its file holds: a
    // checkpoint's byte or sentencepiece matches it when the tokenizer is of that kind.
    if (key == "tokenizer_type" && was.is_string() &&
        (cfg_.data.dataset_type == DatasetType::Hf ||
         tokenizer_kind(was.get<std::string>(), cfg_.data.tokenizer_path) ==
             tokenizer_kind(value.get<std::string>(), cfg_.data.tokenizer_path)))
      continue;
    if (must_match_on_resume(key))
      fail("checkpoint '", ckpt.ref.dir, "' was written with ", key, "=", was.dump(),
           " but this run has ", key, "=", value.dump(),
           "; resuming needs the same value (or use another run_name for a new "
           "run)");
    if (key != "steps") changed.push_back(key + " " + was.dump() + " -> " + value.dump());
  }

  // The global batch must stay (the data stream's position is counted in its rows); how it splits
  // over ranks may change.
  const int64_t saved_rows = saved_config.get_int("per_device_batch_size"),
                saved_ranks = ckpt.ranks;
  const int64_t rows = cfg_.step.per_device_batch_size, ranks = comm_->size();
  if (saved_rows * saved_ranks != rows * ranks)
    fail("checkpoint '", ckpt.ref.dir,
         "' was written with a global batch of per_device_batch_size=", saved_rows, " x ",
         saved_ranks, " ranks = ", saved_rows * saved_ranks,
         " rows, but this run has per_device_batch_size=", rows, " x ", ranks,
         " ranks = ", rows * ranks,
         " rows; resuming needs the same global batch (or use another run_name for a "
         "new run)");

  // This rank's pieces of every parameter and of its moments, from whatever ranks wrote them.
  const ParamTable& table = state_.trained_table(*model_);
  const ShardLayout& layout = state_.layout;
  const DType wdt = state_.weights.dtype();
  Progress progress("restoring " + ckpt.ref.dir, double(table.specs().size()), "tensors");
  Tensor host = Tensor::zeros({layout.local_total}, wdt);
  for (size_t i = 0; i < table.specs().size(); ++i) {
    const ParamSpec& s = table.specs()[i];
    const ParamPiece& p = layout.pieces[i];
    if (!ckpt.params.has(s.name))
      fail("checkpoint '", ckpt.ref.dir, "' has no tensor '", s.name, "'");
    if (ckpt.params.shape(s.name) != s.shape)
      fail("checkpoint '", ckpt.ref.dir, "': '", s.name, "' has shape ",
           shape_str(ckpt.params.shape(s.name)), ", the model needs ", shape_str(s.shape));
    if (p.count > 0) ckpt.params.read(s.name, p.begin, host.flat_slice(p.local, {p.count}));
    const auto [mu, nu] = state_.optimizer->moments_of(i);
    progress.add(1);
    if (!mu.defined()) continue;
    for (const auto& [name, dst] : {std::pair{"mu." + s.name, mu}, std::pair{"nu." + s.name, nu}}) {
      if (!ckpt.optimizer.has(name))
        fail("checkpoint '", ckpt.ref.dir, "' has no tensor '", name, "'");
      Tensor m = Tensor::empty({p.count}, wdt);
      ckpt.optimizer.read(name, p.begin, m);
      backend_->upload(dst, m);
    }
  }
  progress.finish();
  // A checkpoint with more tensors than the run trains (a LoRA run whose targets changed): its
  // other adapters would be dropped without a word.
  for (const std::string& name : ckpt.params.names())
    if (table.find(name) == nullptr)
      fail("checkpoint '", ckpt.ref.dir, "' holds '", name, "', which this run does not train (",
           table.specs().size(), " tensors); resume with the settings that wrote it, or use "
           "another run_name for a new run");
  backend_->upload(state_.weights, host);
  data_->restore(ckpt.state.at("data"));
  start_step_ = ckpt.ref.step;
  notes_.push_back(
      str_cat("resumed from ", ckpt.ref.dir, " (step ", start_step_,
              ckpt.ranks != ranks ? str_cat(", written by ", ckpt.ranks, " ranks") : "", ")"));
  for (const std::string& c : changed) notes_.push_back("changed since the checkpoint: " + c);
}

void Trainer::load_pretrained(const std::string& dir) {
  const LoadedModel m = load_model_dir(dir, state_.weights.dtype());
  if (const std::string d = m.config.shape_difference(model_->config()); !d.empty())
    fail("load_parameters_path='", dir,
         "' holds a different model than model_name=", model_->config().name, " (", d,
         " there vs the run's); set model_name or the model keys "
         "to match it");
  // Every rank reads the whole folder and keeps its pieces.
  upload_weights(*backend_, model_->params(), state_, m.weights);
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
  drop_metrics_from(metrics_options(cfg_.run, run_dir_), start_step_);
}

std::string Trainer::save_checkpoint(int64_t steps_done) {
  const ParamTable& table = state_.trained_table(*model_);
  nlohmann::json state;
  state["data"] = data_->state();
  state["config"] = config_.to_json();
  if (adapters_) {
    const LoraShape& sh = adapters_->shape();
    state["lora"] = {{"rank", sh.rank},
                     {"alpha", sh.alpha},
                     {"rslora", sh.rslora},
                     {"base_source", base_source_},
                     {"base_dtype", dtype_name(model_->options().act)},
                     {"nf4_block", state_.base.nf4 ? state_.base.nf4->layout.block : 0},
                     {"base_crc32c", base_crc_}};
  }
  const int64_t keep = cfg_.checkpoint.max_num_checkpoints_to_keep;
  if (adapters_ && rank0()) write_adapter_folder();
  if (!state_.sharded()) {
    NamedTensors params;
    for (const ParamSpec& s : table.specs())
      params.emplace_back(s.name, backend_->to_host(table.view(state_.weights, s.name)));
    NamedTensors moments;
    for (const auto& [name, view] : state_.optimizer->named_state())
      moments.emplace_back(name, backend_->to_host(view));
    return save_train_checkpoint(checkpoints_dir_, steps_done, params, moments, state, keep);
  }
  // This rank's pieces; the replicated parameters (alike on every rank, a LoRA run's adapters) from
  // rank 0 only.
  std::vector<TensorPiece> params, moments;
  for (size_t i = 0; i < table.specs().size(); ++i) {
    const ParamSpec& s = table.specs()[i];
    const ParamPiece& p = state_.layout.pieces[i];
    if (p.count == 0 || ((p.replicated || adapters_) && !rank0())) continue;
    params.push_back({s.name, backend_->to_host(state_.weights.flat_slice(p.local, {p.count})),
                      p.begin, s.shape});
    const auto [mu, nu] = state_.optimizer->moments_of(i);
    if (!mu.defined()) continue;
    moments.push_back({"mu." + s.name, backend_->to_host(mu), p.begin, s.shape});
    moments.push_back({"nu." + s.name, backend_->to_host(nu), p.begin, s.shape});
  }
  return save_sharded_checkpoint(*comm_, checkpoints_dir_, steps_done, params, moments, state, keep,
                                 [&](const std::string&) {
                                   if (hooks_.after_checkpoint_file)
                                     hooks_.after_checkpoint_file(steps_done);
                                 });
}

void Trainer::skip_or_stop_nonfinite_step(int64_t step, const StepResult& r, TrainSummary& sum,
                                          std::ostream& log) {
  // The update was not applied (AdamW skips a step whose scalars are not finite), so the
  // weights are still those after the previous step. Naming the culprit reads the gradients
  // back, which only this rare path does.
  const double loss = r.loss.total_loss;
  NonfiniteGradient g = state_.optimizer->first_nonfinite_gradient(state_.grads);
  if (comm_->size() > 1) {
    // Each rank's first, then the first of all: registry order, then the lower rank (whose
    // elements come first), so that every rank names the same one.
    Tensor mine = control_buffer({3}, DType::I64);
    mine.data<int64_t>()[0] = g.spec;
    mine.data<int64_t>()[1] = g.element;
    std::memcpy(mine.data<int64_t>() + 2, &g.value, sizeof(double));
    Tensor all = control_buffer({3 * comm_->size()}, DType::I64);
    comm_->all_gather(mine, all, "the non-finite gradients").wait();
    g = {};
    for (int q = 0; q < comm_->size(); ++q) {
      const int64_t* a = all.data<int64_t>() + 3 * q;
      if (a[0] < 0 || (g.spec >= 0 && a[0] >= g.spec)) continue;
      g.spec = a[0];
      g.element = a[1];
      std::memcpy(&g.value, a + 2, sizeof(double));
    }
  }
  const std::string culprit =
      g.spec < 0 ? std::string()
                 : str_cat(state_.trained_table(*model_).specs()[size_t(g.spec)].name, " (element ",
                           g.element, ": ", g.value, ")");
  const std::string what = str_cat(
      "step ", step, ": ",
      std::isfinite(loss) ? str_cat("the gradient norm is ", r.raw_grad_norm, " (loss ", loss, ")")
                          : str_cat("the loss is ", loss),
      culprit.empty() ? std::string()
                      : "; the first parameter with a non-finite gradient is " + culprit,
      "; the update was not applied");
  const char* abort_key = std::isnan(loss) && cfg_.run.abort_on_nan_loss   ? "abort_on_nan_loss"
                          : std::isinf(loss) && cfg_.run.abort_on_inf_loss ? "abort_on_inf_loss"
                                                                           : nullptr;
  const int64_t allowed = cfg_.run.skip_nonfinite_steps;
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

void Trainer::check_sample_tokenizer(int64_t vocab_size) const {
  // Shards carry their ids; the closing sample decodes with tokenizer_path, which must be the
  // model's too: checked now rather than after training. (Other data reads tokenizer_path
  // itself, and its loader checks it.)
  if (cfg_.data.dataset_type != DatasetType::Shards || cfg_.data.tokenizer_path.empty() ||
      cfg_.run.sample_max_new_tokens <= 0)
    return;
  const auto tok =
      make_tokenizer(run_tokenizer_type(cfg_), cfg_.data.tokenizer_path);
  if (tok->vocab_size() > vocab_size)
    fail("tokenizer_path '", cfg_.data.tokenizer_path, "' holds ", tok->describe(),
         ", a vocabulary of ", tok->vocab_size(), " ids, larger than the model's (vocab_size ",
         vocab_size,
         "): it is not the model's tokenizer, and the closing sample decodes with it; "
         "give the tokenizer the shards were made with, or sample_max_new_tokens=0");
}

void Trainer::print_sample(std::ostream& log) const {
  const int64_t n = cfg_.run.sample_max_new_tokens;
  if (n <= 0 || cfg_.data.dataset_type == DatasetType::Synthetic) return;
  if (state_.base.nf4) {
    log << "gemmax: no closing sample: the base is in NF4 blocks (gemmax sample --model RUN "
           "decodes the run's checkpoint)\n";
    return;
  }
  const auto tokenizer = make_tokenizer(run_tokenizer_type(cfg_), cfg_.data.tokenizer_path);
  SampleOptions opts;
  opts.max_new_tokens = n;
  opts.temperature = 0.7;
  opts.top_k = 40;
  const Generation g =
      adapters_ ? generate(*model_, state_.base.weights, *tokenizer, cfg_.run.sample_prompt, opts,
                           {adapters_.get(), state_.weights})
                : generate(*model_, state_.weights, *tokenizer, cfg_.run.sample_prompt, opts);
  log << "gemmax: sample (temperature 0.7, top_k 40): " << g.prompt_text << g.completion << "\n";
}

void Trainer::print_header(std::ostream& log) const {
  const ModelConfig& c = model_->config();
  const StepFlops f = training_flops(c, batch_, seq_, adapters_.get());
  if (const std::string l = config_.ignored_keys_line(); !l.empty()) log << "gemmax: " << l << "\n";
  log << "gemmax: model " << c.name << " | " << c.num_layers << " layers (" << c.num_global_layers()
      << " global) | d_model " << c.d_model << " | "
      << (c.has_moe() ? str_cat(c.num_experts, " experts top-", c.num_experts_per_tok)
                      : std::string("dense"))
      << " | vocab " << c.vocab_size << "\n";
  int64_t trained = 0;
  for (size_t i = 0; i < trainable_.size(); ++i)
    trained += trainable_[i] ? state_.trained_table(*model_).specs()[i].numel() : 0;
  log << "gemmax: parameters " << format_count(double(model_->params().total())) << " total, "
      << format_count(double(model_->params().active())) << " active per token";
  if (adapters_)
    log << ", frozen; LoRA adapters " << format_count(double(trained)) << " trained";
  else if (trained != model_->params().total())
    log << ", " << format_count(double(trained)) << " trained (freeze='" << cfg_.run.freeze << "')";
  log << "\n";
  if (adapters_) log << "gemmax: " << describe_adapters(*adapters_, cfg_.lora) << "\n";
  log << "gemmax: per step " << batch_ << " x " << seq_ << " tokens | " << std::setprecision(4);
  if (adapters_)  // the frozen weights' products forward and to their inputs only
    log << f.lora_total() / 1e12 << " TFLOP (frozen weights " << 2 * f.learnable / 1e12
        << ", attention " << 3 * f.attention / 1e12 << ", adapters " << 3 * f.adapters / 1e12
        << "; a full fine-tune's step: " << f.total() / 1e12 << ")\n";
  else
    log << f.total() / 1e12 << " TFLOP (learnable " << 3 * f.learnable / 1e12 << ", attention "
        << 3 * f.attention / 1e12 << ")\n";
  log << "gemmax: backend " << backend_->describe() << " | dtype " << dtype_name(cfg_.step.dtype)
      << " | remat " << name_of(cfg_.step.remat_policy) << " | data " << data_->describe() << "\n";
  if (state_.sharded()) {
    const FsdpOptions& o = state_.fsdp;
    log << "gemmax: FSDP over " << comm_->size() << " ranks (" << comm_->name()
        << ") | global batch " << comm_->size() * batch_ << " x " << seq_ << " | small vectors "
        << (o.replicate_small ? "replicated" : "sharded") << " | embedding "
        << embedding_mode_name(o.embedding)
        << (o.embedding_choice.empty() ? "" : " (" + o.embedding_choice + ")") << " | prefetch "
        << o.prefetch << " layer(s) | head tiles along the "
        << (o.tile_batch ? "global batch (all-to-alls)" : "sequence") << "\n";
  }
  log << "gemmax: " << format_memory_plan(plan_);
  for (const std::string& n : notes_) log << "gemmax: " << n << "\n";
  log << "gemmax: run directory " << run_dir_ << "\n";
}

TrainSummary Trainer::run(std::ostream& out) {
  // Rank 0 speaks for the run; the other ranks' log goes nowhere.
  std::ostream null_stream(nullptr);
  std::ostream& log = rank0() ? out : null_stream;
  TrainSummary sum;
  if (stopped_while_loading_) {
    log << "gemmax: stopped by " << StopSignal::name(stopped_while_loading_)
        << " while loading; nothing was written" << std::endl;
    sum.stop_signal = stopped_while_loading_;
    return sum;
  }
  print_header(log);
  sum.final_step = start_step_;
  if (start_step_ >= steps_) {
    log << "gemmax: nothing to do: the run already completed " << start_step_
        << " steps (steps=" << steps_ << ")\n";
    return sum;
  }
  // Measured peaks cover the steps only (setup's transients, e.g. initialisation, are not part
  // of the plan). The tracker is process-wide: other live models would count too.
  MemoryTracker::global().reset_peaks();
  std::optional<MetricsSink> metrics;  // rank 0 writes the run's metrics
  if (rank0()) metrics.emplace(metrics_options(cfg_.run, run_dir_), log);
  const StepFlops flops = training_flops(model_->config(), batch_, seq_, adapters_.get());
  const double step_tflop = (adapters_ ? flops.lora_total() : flops.total()) / 1e12;
  const double peak = cfg_.run.peak_tflops_per_device;
  const bool checkpointing = cfg_.checkpoint.enable_checkpointing;
  const int64_t period = cfg_.checkpoint.checkpoint_period;
  const StopSignal stop;
  double timed_seconds = 0;
  const AllocationScope what(
      "a training step (per_device_batch_size, max_target_length, remat_policy, "
      "num_vocab_tiling)");
  for (int64_t step = start_step_; step < steps_; ++step) {
    Timer timer;
    comm_->set_progress(str_cat("step ", step));
    if (hooks_.before_step) hooks_.before_step(step);
    const CommStats comm_before = comm_->stats();
    const Batch batch = data_->next();
    const double lr = schedule_.at(step);
    StepInputs in;
    if (state_.sharded()) {
      ShardedBatch b = upload_sharded_batch(*backend_, *comm_, state_.model_layout(), state_.fsdp,
                                            model_->options().num_vocab_tiling,
                                            model_->config().vocab_size, batch);
      in = b.in;
      train_step(*backend_, *model_, state_, in, lr, step + 1, b.vocab);
    } else {
      in = upload_batch(*backend_, batch);
      train_step(*backend_, *model_, state_, in, lr, step + 1);
    }
    const StepResult r = read_step(*backend_, *model_, state_, in);  // the step's one read
    in = StepInputs();  // an evaluation below runs in the memory the step used
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
    // The data counts targets (the loader refuses masks that mark nothing), but a global batch
    // can hold none: rows of prompt only. Such a step learns nothing; said once, and counted.
    if (loss.num_targets == 0 && sum.zero_target_steps++ == 0)
      log << "gemmax: warning: step " << step
          << " counted no target token (its rows' loss masks mark nothing, prompts only): its "
             "loss is 0 and it learns nothing, its update the optimizer's momentum and weight "
             "decay alone. metrics.jsonl's learning/total_weights counts each step's targets, "
             "and the run's summary the steps without any"
          << std::endl;
    m.skipped_steps = sum.skipped_steps;
    if (state_.sharded()) {
      const CommStats c = comm_->stats() - comm_before;
      m.has_comm = true;
      m.comm_all_gather_bytes = c.all_gather_bytes;
      m.comm_reduce_scatter_bytes = c.reduce_scatter_bytes;
      m.comm_all_reduce_bytes = c.all_reduce_bytes;
      m.comm_all_to_all_bytes = c.all_to_all_bytes;
      m.comm_wait_seconds = c.wait_seconds;
    }
    // Evaluation after the step, its figures on the step's line; collective under FSDP, so every
    // rank sees the same loss and takes the same decision.
    bool reached_target = false;
    if (eval_ && eval_->due(step + 1, steps_)) {
      const EvalResult e = eval_->run(*backend_, *model_, state_);
      m.has_eval = true;
      m.eval_avg_loss = e.avg_loss();
      m.eval_total_loss = e.total_loss;
      m.eval_total_weights = e.total_weights;
      m.eval_moe_lb_loss = e.moe_lb_loss;
      m.eval_batches = e.batches;
      sum.evaluations += 1;
      sum.last_eval_loss = e.avg_loss();
      reached_target = eval_->target_loss() > 0 && e.avg_loss() <= eval_->target_loss();
    }
    if (metrics) metrics->write(m, step + 1 == steps_);

    if (sum.steps == 0)
      sum.first_loss = m.loss;
    else
      timed_seconds += m.step_seconds;
    sum.last_loss = m.loss;
    sum.steps += 1;
    sum.final_step = step + 1;

    // One read of the stop request decides this step's save. A request that arrives during a
    // save (or after a step that saved) stops the run at once: the checkpoint holds this step.
    // Under FSDP the ranks agree on each read (the largest signal any rank received), so a
    // signal stops every rank after the same step.
    const int64_t done = step + 1;
    const int requested = agreed_stop_signal(stop, "the stop signals");
    bool saved = false;
    if (checkpointing &&
        ((period > 0 && done % period == 0) || done == steps_ || requested || reached_target)) {
      sum.last_checkpoint = save_checkpoint_or_die(stop, done, log);
      saved = true;
      log << "gemmax: saved checkpoint " << sum.last_checkpoint << std::endl;
    }
    // Read again after a save (the same decision on every rank, so the same collective).
    sum.stop_signal = (requested != 0 || saved) && done < steps_
                          ? agreed_stop_signal(stop, "the stop signals after a save")
                          : 0;
    if (reached_target && done < steps_) {
      sum.reached_target_eval_loss = true;
      log << "gemmax: eval loss " << sum.last_eval_loss << " <= target_eval_loss "
          << eval_->target_loss() << " after step " << done << ": the run stops"
          << (checkpointing ? "; checkpoint saved in " + sum.last_checkpoint
                            : std::string("; enable_checkpointing=false: nothing was saved"))
          << std::endl;
      break;
    }
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
  // Every rank's measured peaks, for memory.json.
  Tensor peaks = control_buffer({int64_t(kNumMemKinds) + 1}, DType::I64);
  for (size_t k = 0; k < kNumMemKinds; ++k)
    peaks.data<int64_t>()[k] = int64_t(mem.peak(MemKind(k)));
  peaks.data<int64_t>()[kNumMemKinds] = int64_t(mem.peak_total());
  Tensor all_peaks = control_buffer({comm_->size() * peaks.numel()}, DType::I64);
  comm_->all_gather(peaks, all_peaks, "the measured memory peaks").wait();
  log << "gemmax: done: " << sum.steps << " steps (run at step " << sum.final_step << ") | loss "
      << std::setprecision(4) << sum.first_loss << " -> " << sum.last_loss << " | mean step "
      << sum.mean_step_seconds << " s | " << std::setprecision(6) << sum.tokens_per_sec
      << " tokens/s | " << sum.tflops_per_sec << " TFLOP/s | peak memory "
      << format_bytes(double(mem.peak_total())) << "\n";
  if (sum.zero_target_steps > 0)
    log << "gemmax: " << sum.zero_target_steps << " of " << sum.steps
        << " steps counted no target token (loss 0, nothing learnt): see learning/total_weights "
           "in metrics.jsonl\n";
  if (sum.evaluations > 0)
    log << "gemmax: held-out loss " << std::setprecision(4) << sum.last_eval_loss
        << " (eval/avg_loss after step " << sum.final_step << ") beside the training loss "
        << sum.last_loss << "\n";
  log << "gemmax: " << format_memory_plan(plan_, &mem);
  if (rank0()) {
    nlohmann::json j = memory_json(plan_, mem);
    if (comm_->size() > 1) {
      for (int r = 0; r < comm_->size(); ++r) {
        nlohmann::json m;
        const int64_t* p = all_peaks.data<int64_t>() + r * peaks.numel();
        for (size_t k = 0; k < kNumMemKinds; ++k) m[std::string(mem_kind_name(MemKind(k)))] = p[k];
        m["total"] = p[kNumMemKinds];
        j["measured_per_rank"].push_back(m);
      }
      const CommStats& c = plan_.comm;
      j["planned_comm_per_step"] = {{"all_gather_bytes", c.all_gather_bytes},
                                    {"reduce_scatter_bytes", c.reduce_scatter_bytes},
                                    {"all_reduce_bytes", c.all_reduce_bytes},
                                    {"all_to_all_bytes", c.all_to_all_bytes}};
    }
    write_file_atomic((fs::path(run_dir_) / "memory.json").string(), j.dump(2) + "\n");
    log << "gemmax: " << metrics->describe() << "\n";
  }
  if (state_.sharded())
    log << "gemmax: no sample: the weights are sharded (gemmax export, then gemmax sample)\n";
  else if (!stop.received())  // a run asked to stop ends promptly
    print_sample(log);
  return sum;
}

}  // namespace gemmax

// The training loop: data -> forward/backward -> clip -> AdamW, with per-step metrics,
// train-state checkpoints, exact resume and graceful stop.
//
// Under mpirun every rank runs a Trainer over the same Comm: each trains its FSDP shard on its rows
// of the global batch (parallel/fsdp.h) and writes its own checkpoint shard; rank 0 prints the log
// and writes the run folder's other files.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "gemmax/backend/backend.h"
#include "gemmax/config/config.h"
#include "gemmax/config/train_config.h"
#include "gemmax/data/loader.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/parallel/comm.h"
#include "gemmax/train/memory_plan.h"
#include "gemmax/train/schedule.h"
#include "gemmax/train/step.h"
#include "gemmax/train/train_hooks.h"

namespace gemmax {

struct TrainCheckpoint;
class StopSignal;
class RunDirLock;
class Evaluator;

struct TrainSummary {
  int64_t steps = 0;       // steps run by this invocation
  int64_t final_step = 0;  // completed steps of the run, resumed ones included
  double first_loss = 0, last_loss = 0;
  double mean_step_seconds = 0;  // over this invocation's steps after its first
  double tokens_per_sec = 0, tflops_per_sec = 0;
  int stop_signal = 0;          // SIGINT / SIGTERM that stopped the run early, or 0
  int64_t skipped_steps = 0;    // steps not applied for a non-finite loss or gradient
  int64_t zero_target_steps = 0;  // steps whose loss masks counted no target token
  std::string last_checkpoint;  // folder of the last checkpoint saved, if any
  int64_t evaluations = 0;      // evaluations run
  double last_eval_loss = 0;    // eval/avg_loss of the last one
  bool reached_target_eval_loss = false;  // stopped early: eval/avg_loss <= target_eval_loss
};

class Trainer {
 public:
  // Builds everything the config names and resumes from the run's latest checkpoint if there
  // is one. Throws gemmax::Error for bad input before any step and before writing anything.
  // `comm`: the ranks of the run (null: one rank); `hooks`: callbacks for tests (none by default).
  explicit Trainer(const Config& config, Comm* comm = nullptr, TrainHooks hooks = {});
  ~Trainer();

  // Logs to `log` on rank 0 only.
  TrainSummary run(std::ostream& log);

  const Gemma4Model& model() const { return *model_; }
  const Tensor& weights() const { return state_.weights; }  // this rank's (layout())
  // A LoRA run's adapters (null otherwise); weights() are then theirs, base_weights() the frozen
  // model's.
  const AdapterTable* adapters() const { return adapters_.get(); }
  const Tensor& base_weights() const { return state_.model_weights(); }
  const ShardLayout& layout() const { return state_.layout; }
  const std::string& run_dir() const { return run_dir_; }
  int64_t start_step() const { return start_step_; }
  // SIGINT / SIGTERM that arrived while the weights loaded: run() then writes nothing.
  int stopped_while_loading() const { return stopped_while_loading_; }
  const MemoryPlan& memory_plan() const { return plan_; }

 private:
  void resume_from(const TrainCheckpoint& ckpt);
  void load_pretrained(const std::string& dir);
  void initialise();
  // A LoRA run: its frozen base (load_parameters_path, else initialised from the seed) and, for a
  // new run, its adapters (lora_restore_path or hf_lora_adapter_path, else PEFT's initialisation).
  void load_lora_base();
  void load_nf4_base();
  void start_adapters();
  // Rank 0: the adapters as a PEFT folder, run_dir/adapter (replaced whole).
  void write_adapter_folder();
  std::string save_checkpoint(int64_t steps_done);
  // stop.received(), agreed by every rank (the largest): a collective under FSDP, `what` names it.
  int agreed_stop_signal(const StopSignal& stop, const char* what) const;
  int agreed_signal(int signal, const char* what) const;
  bool rank0() const { return comm_->rank() == 0; }
  // After a step that was not applied for a non-finite loss or gradient: counts it as skipped
  // if skip_nonfinite_steps allows, else throws an Error naming the step and the first
  // parameter whose gradient is not finite.
  void skip_or_stop_nonfinite_step(int64_t step, const StepResult& r, TrainSummary& sum,
                                   std::ostream& log);
  // save_checkpoint, ending the process instead if Ctrl-C is pressed twice meanwhile.
  std::string save_checkpoint_or_die(const StopSignal& stop, int64_t steps_done, std::ostream& log);
  void prepare_run_dir();
  void print_header(std::ostream& log) const;
  void check_sample_tokenizer(int64_t vocab_size) const;  // tokenizer_path against the model
  void print_sample(std::ostream& log) const;

  Config config_;    // as given: saved with checkpoints, compared across ranks and on resume
  TrainConfig cfg_;  // read from config_ once
  TrainHooks hooks_;
  std::unique_ptr<Comm> own_comm_;
  Comm* comm_ = nullptr;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Comm> routed_comm_;  // backend=cuda on several ranks: NCCL beside *own/given
  std::unique_ptr<Gemma4Model> model_;
  std::unique_ptr<DataLoader> data_;
  std::unique_ptr<Evaluator> eval_;         // null: no evaluation
  std::vector<bool> trainable_;             // of the trained table: the model's, or the adapters'
  std::unique_ptr<AdapterTable> adapters_;  // a LoRA run
  uint32_t base_crc_ = 0;                   // a LoRA run's frozen base, as loaded
  std::string base_source_, base_prefix_ = "model.";  // its folder, and its tensors' HF prefix
  LrSchedule schedule_;
  MemoryPlan plan_;
  TrainState state_;
  int64_t steps_ = 0, batch_ = 0, seq_ = 0, start_step_ = 0;
  int stopped_while_loading_ = 0;
  std::string run_dir_, checkpoints_dir_;
  std::unique_ptr<RunDirLock> run_lock_;  // rank 0 owns the run folder while the run lives
  std::vector<std::string> notes_;  // what setup did (resume, fine-tune source), for the log
};

}  // namespace gemmax

// A training run's configuration, typed: the key/value Config (config.h) read once into one
// struct per part of the run, so that the code reads fields, not key strings.
//
// train_config_from() runs the run's validation (validate.h) and the model's (ModelConfig), then
// copies every key a run reads into its field. Checks that need more than one part (the memory
// plan's, the sharding's, the evaluation's) stay with the code that combines them, with the same
// messages, which name the keys. The field names are the keys' (configs/base.yml says what each
// means), so a message, a log line or a grep finds both.
#pragma once

#include <cstdint>
#include <string>

#include "gemmax/config/config.h"
#include "gemmax/config/model_config.h"

namespace gemmax {

// What a step computes and in what precision.
struct StepConfig {
  int64_t per_device_batch_size = 1, max_target_length = 1;
  std::string dtype, weight_dtype, remat_policy;
  int64_t num_vocab_tiling = 1;
  bool norm_scale_in_fp32 = true, logits_dot_in_fp32 = false, moe_fuse_permute_combine = true, moe_fused_gate_up = true,
       moe_dlhs_in_place = true;
  bool activations_in_float32 = true, float32_weight_sum = true,  // MaxText's precision keys
       float32_gate_logits = false, float32_qk_product = false, float32_logits = false;
  std::string attention;  // autoselected | flash | dot_product
};

// The training loop: steps, schedule, initialisation, non-finite steps, logging, the sample.
struct RunConfig {
  std::string base_output_directory, run_name;
  int64_t steps = 0;
  double learning_rate = 0, warmup_steps_fraction = 0, cosine_learning_rate_final_fraction = 0;
  int64_t learning_rate_schedule_steps = -1;
  int64_t init_weights_seed = 0;
  std::string load_parameters_path, freeze;
  bool abort_on_nan_loss = true, abort_on_inf_loss = true;
  int64_t skip_nonfinite_steps = 0;
  double peak_tflops_per_device = 0;
  int64_t log_period = 1;
  bool enable_tensorboard = true;
  std::string tensorboard_dir;
  int64_t sample_max_new_tokens = 0;
  std::string sample_prompt;
  bool dry_run = false;
  double max_memory_gb = 0;
};

struct OptimizerConfig {
  std::string opt_type;
  double adam_b1 = 0, adam_b2 = 0, adam_eps = 0, adam_eps_root = 0, adam_weight_decay = 0;
  double gradient_clipping_threshold = 0;
  bool maxtext_embedding_table = false;  // embedding_table=maxtext: Adam in MaxText's units
};

struct DataConfig {
  std::string dataset_type, dataset_path, tokenizer_type, tokenizer_path;
  bool packing = true, sft_train_on_completion_only = false;
  int64_t data_shuffle_seed = 0;
  // MaxText's grain pipeline (docs/DATA.md): first-fit packing, window shuffle, truncation.
  std::string grain_packing_type;
  bool enable_data_shuffling = false, use_truncation = false;
  int64_t grain_shuffle_buffer_size = 100;
};

// Several ranks (FSDP) and the seed's sharding switches.
struct ParallelConfig {
  int64_t ici_fsdp_parallelism = -1;
  bool fsdp_replicate_small_params = true;
  std::string fsdp_embedding, vocab_tiling_axis;
  int64_t fsdp_prefetch_layers = 1;
  double comm_timeout_seconds = 0;
};

struct CheckpointConfig {
  bool enable_checkpointing = true;
  int64_t checkpoint_period = 0, max_num_checkpoints_to_keep = 0;
};

struct EvalConfig {
  int64_t eval_interval = -1, eval_steps = 0, eval_per_device_batch_size = 0;
  std::string eval_dataset_path;
  double target_eval_loss = 0;
};

// The backend keys; backend_options (train/memory_budget.h) checks them into BackendOptions.
struct BackendConfig {
  std::string backend;
  int64_t num_threads = 0;
  std::string cpu_kernels;  // or cpu_isa, its former name, where only that was set
  std::string cuda_kernels;
  std::string cuda_gmm;
  std::string cuda_attention = "mma";
  bool cuda_sync_check = false;
};

struct TrainConfig {
  ModelConfig model;
  StepConfig step;
  RunConfig run;
  OptimizerConfig optimizer;
  DataConfig data;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  EvalConfig eval;
  BackendConfig backend;
};

// Validates `config` (validate_run_config, the model's sizes) and reads it. Throws gemmax::Error
// for the first bad value, naming the key.
TrainConfig train_config_from(const Config& config);

}  // namespace gemmax

#include "gemmax/config/train_config.h"

#include "gemmax/base/error.h"
#include "gemmax/config/run_config.h"
#include "gemmax/config/validate.h"

namespace gemmax {

TrainConfig train_config_from(const Config& c) {
  validate_run_config(c);
  TrainConfig t;
  t.model = model_config_from(c);

  StepConfig& s = t.step;
  s.per_device_batch_size = c.get_int("per_device_batch_size");
  s.max_target_length = c.get_int("max_target_length");
  s.dtype = c.get_string("dtype");
  s.weight_dtype = c.get_string("weight_dtype");
  s.remat_policy = c.get_string("remat_policy");
  s.num_vocab_tiling = c.get_int("num_vocab_tiling");
  s.norm_scale_in_fp32 = c.get_bool("norm_scale_in_fp32");
  s.logits_dot_in_fp32 = c.get_bool("logits_dot_in_fp32");
  s.moe_fuse_permute_combine = c.get_bool("moe_fuse_permute_combine");
  s.moe_fused_gate_up = c.get_bool("moe_fused_gate_up");
  s.moe_dlhs_in_place = c.get_bool("moe_dlhs_in_place");
  s.activations_in_float32 = c.get_bool("activations_in_float32");
  s.float32_weight_sum = c.get_bool("float32_weight_sum");
  s.float32_gate_logits = c.get_bool("float32_gate_logits");
  s.float32_qk_product = c.get_bool("float32_qk_product");
  s.float32_logits = c.get_bool("float32_logits");
  s.attention = c.get_string("attention");

  RunConfig& r = t.run;
  r.base_output_directory = c.get_string("base_output_directory");
  r.run_name = c.get_string("run_name");
  r.steps = c.get_int("steps");
  r.learning_rate = c.get_double("learning_rate");
  r.learning_rate_schedule_steps = c.get_int("learning_rate_schedule_steps");
  r.warmup_steps_fraction = c.get_double("warmup_steps_fraction");
  r.cosine_learning_rate_final_fraction = c.get_double("cosine_learning_rate_final_fraction");
  r.init_weights_seed = c.get_int("init_weights_seed");
  r.load_parameters_path = c.get_string("load_parameters_path");
  r.freeze = c.get_string("freeze");
  r.abort_on_nan_loss = c.get_bool("abort_on_nan_loss");
  r.abort_on_inf_loss = c.get_bool("abort_on_inf_loss");
  r.skip_nonfinite_steps = c.get_int("skip_nonfinite_steps");
  r.peak_tflops_per_device = c.get_double("peak_tflops_per_device");
  r.log_period = c.get_int("log_period");
  r.enable_tensorboard = c.get_bool("enable_tensorboard");
  r.tensorboard_dir = c.get_string("tensorboard_dir");
  r.sample_max_new_tokens = c.get_int("sample_max_new_tokens");
  r.sample_prompt = c.get_string("sample_prompt");
  r.dry_run = c.get_bool("dry_run");
  r.max_memory_gb = c.get_double("max_memory_gb");

  OptimizerConfig& o = t.optimizer;
  o.opt_type = c.get_string("opt_type");
  o.adam_b1 = c.get_double("adam_b1");
  o.adam_b2 = c.get_double("adam_b2");
  o.adam_eps = c.get_double("adam_eps");
  o.adam_eps_root = c.get_double("adam_eps_root");
  o.adam_weight_decay = c.get_double("adam_weight_decay");
  o.gradient_clipping_threshold = c.get_double("gradient_clipping_threshold");
  const std::string table = c.get_string("embedding_table");
  if (table != "hf" && table != "maxtext")
    fail("embedding_table: expected hf (Adam trains Hugging Face's table) or maxtext (Adam trains "
         "MaxText's table, sqrt(D) times HF's), got '", table, "'");
  o.maxtext_embedding_table = table == "maxtext";

  DataConfig& d = t.data;
  d.dataset_type = c.get_string("dataset_type");
  d.dataset_path = c.get_string("dataset_path");
  d.tokenizer_type = c.get_string("tokenizer_type");
  d.tokenizer_path = c.get_string("tokenizer_path");
  d.packing = c.get_bool("packing");
  d.sft_train_on_completion_only = c.get_bool("sft_train_on_completion_only");
  d.data_shuffle_seed = c.get_int("data_shuffle_seed");
  d.grain_packing_type = c.get_string("grain_packing_type");
  d.enable_data_shuffling = c.get_bool("enable_data_shuffling");
  d.grain_shuffle_buffer_size = c.get_int("grain_shuffle_buffer_size");
  d.use_truncation = c.get_bool("use_truncation");

  ParallelConfig& p = t.parallel;
  p.ici_fsdp_parallelism = c.get_int("ici_fsdp_parallelism");
  p.fsdp_replicate_small_params = c.get_bool("fsdp_replicate_small_params");
  p.fsdp_embedding = c.get_string("fsdp_embedding");
  p.vocab_tiling_axis = c.get_string("vocab_tiling_axis");
  p.fsdp_prefetch_layers = c.get_int("fsdp_prefetch_layers");
  p.comm_timeout_seconds = c.get_double("comm_timeout_seconds");

  CheckpointConfig& k = t.checkpoint;
  k.enable_checkpointing = c.get_bool("enable_checkpointing");
  k.checkpoint_period = c.get_int("checkpoint_period");
  k.max_num_checkpoints_to_keep = c.get_int("max_num_checkpoints_to_keep");

  EvalConfig& e = t.eval;
  e.eval_interval = c.get_int("eval_interval");
  e.eval_steps = c.get_int("eval_steps");
  e.eval_per_device_batch_size = c.get_int("eval_per_device_batch_size");
  e.eval_dataset_path = c.get_string("eval_dataset_path");
  e.target_eval_loss = c.get_double("target_eval_loss");

  BackendConfig& b = t.backend;
  b.backend = c.get_string("backend");
  b.num_threads = c.get_int("num_threads");
  b.cpu_kernels = c.get_string("cpu_kernels");
  // cpu_isa, cpu_kernels' former name, still comes in older run folders' configs and checkpoints.
  if (const std::string& old = c.get_string("cpu_isa");
      !old.empty() && !c.set_by_user("cpu_kernels"))
    b.cpu_kernels = old;
  b.cuda_kernels = c.get_string("cuda_kernels");
  b.cuda_gmm = c.get_string("cuda_gmm");
  b.cuda_attention = c.get_string("cuda_attention");
  b.cuda_sync_check = c.get_bool("cuda_sync_check");
  return t;
}

}  // namespace gemmax

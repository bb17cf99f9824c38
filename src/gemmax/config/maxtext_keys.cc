#include "gemmax/config/maxtext_keys.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"

namespace gemmax {
namespace {

constexpr KeyClass I = KeyClass::Implemented, F = KeyClass::Fixed, N = KeyClass::NoMeaning;

// Why a key has no meaning here (one phrase per group; the doc lists the keys by group).
constexpr std::string_view kXla = "JAX, XLA compilation, scanning and the TPU device mesh";
constexpr std::string_view kKernel = "choices and tile sizes of MaxText's TPU and GPU kernels";
constexpr std::string_view kCheckpointStorage =
    "Orbax checkpoint storage, asynchronous, multi-tier and emergency checkpoints";
constexpr std::string_view kCloud = "cloud storage and services, remote logging, elastic training";
constexpr std::string_view kProfiler = "profilers, debug dumps and diagnostics";
constexpr std::string_view kInference = "inference and serving (gemmax train trains)";
constexpr std::string_view kMultimodal = "the vision and audio towers (use_multimodal is false)";
constexpr std::string_view kRematCustom = "tensor placements of remat_policy=custom";
constexpr std::string_view kRope =
    "the RoPE of other decoder blocks (gemma4 uses local_ and global_rope_max_timescale)";
constexpr std::string_view kDataPipeline =
    "options of MaxText's input pipelines; gemmax's (docs/DATA.md) packs sequentially or "
    "first-fit, and wraps to the start at its end";
constexpr std::string_view kCheckpointOnStart =
    "gemmax saves no checkpoint before the first step (a fresh run restarts from its seeds)";
constexpr std::string_view kLoadFormat =
    "the format of load_parameters_path: gemmax reads a Hugging Face safetensors folder";
constexpr std::string_view kNoDropout =
    "no effect: there is no dropout (dropout_rate is fixed at 0)";
constexpr std::string_view kBlock = "decided per layer by the gemma4 block itself";
constexpr std::string_view kNetwork = "network shaping between TPU slices";
constexpr std::string_view kChatTemplate =
    "a training run reads token shards: conversations are rendered when they are tokenized, "
    "by `gemmax tokenize --chat_template_path FILE` (or --chat_template TEXT, or the model "
    "folder's template; docs/DATA.md)";
constexpr std::string_view kOff =
    "settings of a feature gemmax does not have, whose switch is fixed off";

// Every key of MaxText 0.2.5's configs/base.yml and configs/models/gemma4-*.yml, in base.yml's
// order. To move a key to another class, edit its row (an implemented key must also be in
// configs/base.yml; ConfigMaxText tests check both ways).
constexpr MaxTextKey kKeys[] = {
    {"run_name", I},
    {"model_name", I},
    {"use_m3_model", F, "false"},
    {"override_model_config", N, "", "gemmax's command line always overrides the preset"},
    {"override_logical_axis_rules", N, "", kXla},
    {"normalization_layer_epsilon", I},
    {"load_parameters_path", I},
    {"lora_input_adapters_path", F, "\"\""},
    {"hf_lora_adapter_path", F, "\"\""},
    {"load_full_state_path", F, "\"\""},
    {"enable_checkpointing", I},
    {"save_checkpoint_on_start", N, "", kCheckpointOnStart},
    {"save_checkpoint_on_completion", F, "true"},
    {"async_checkpointing", N, "", kCheckpointStorage},
    {"checkpoint_period", I},
    {"max_num_checkpoints_to_keep", I, "", "", "0"},
    {"enable_continuous_checkpointing", N, "", kCheckpointStorage},
    {"enable_single_replica_ckpt_restoring", N, "", kCheckpointStorage},
    {"checkpoint_todelete_subdir", N, "", kCheckpointStorage},
    {"checkpoint_todelete_full_path", N, "", kCheckpointStorage},
    {"standalone_checkpointer_per_step_interval", N, "", kCheckpointStorage},
    {"standalone_checkpointer_drop_page_cache_before_restore", N, "", kCheckpointStorage},
    {"standalone_checkpointer_enable_restore_in_loop", N, "", kCheckpointStorage},
    {"standalone_checkpointer_start_from_checkpoint", N, "", kCheckpointStorage},
    {"force_unroll", N, "", kCheckpointStorage},
    {"checkpoint_storage_target_data_file_size_bytes", N, "", kCheckpointStorage},
    {"checkpoint_storage_use_ocdbt", N, "", kCheckpointStorage},
    {"checkpoint_storage_use_zarr3", N, "", kCheckpointStorage},
    {"checkpoint_storage_concurrent_gb", N, "", kCheckpointStorage},
    {"checkpoint_storage_device_host_concurrent_gb", N, "", kCheckpointStorage},
    {"enable_orbax_v1", N, "", kCheckpointStorage},
    {"checkpoint_conversion_fn", N, "", kLoadFormat},
    {"source_checkpoint_layout", N, "", kLoadFormat},
    {"colocated_python_checkpointing", N, "", kCloud},
    {"enable_autocheckpoint", N, "", kCheckpointStorage},
    {"reuse_example_batch", N, "", kXla},
    {"metrics_file", N, "", kCloud},
    {"gcs_metrics", N, "", kCloud},
    {"enable_wandb", N, "", kCloud},
    {"wandb_project_name", N, "", kCloud},
    {"wandb_run_name", N, "", kCloud},
    {"save_config_to_gcs", N, "", kCloud},
    {"grad_dtype", F, "\"float32\""},
    {"dtype", I},
    {"quantization", F, "\"\"", "no quantization: products run in dtype with fp32 accumulation"},
    {"constant_bound_config", N, "", kOff},
    {"matmul_precision", F, "\"default\""},
    {"activations_in_float32", I},
    {"replicate_quant_scale", N, "", kOff},
    {"quant_cfg_path", N, "", kOff},
    {"quantize_kvcache", N, "", kInference},
    {"kv_quant_axis", N, "", kInference},
    {"kv_quant_dtype", N, "", kInference},
    {"quantize_mtp", N, "", kOff},
    {"quantize_router_proj", N, "", kOff},
    {"quantize_logits_proj", N, "", kOff},
    {"logits_proj_quant_calibration_method", N, "", kOff},
    {"checkpoint_is_quantized", F, "false"},
    {"save_quantized_params_path", N, "", kInference},
    {"model_call_mode", N, "", kInference},
    {"use_qwix_quantization", F, "false"},
    {"use_manual_quantization", N, "", kKernel},
    {"weight_quantization_calibration_method", N, "", kOff},
    {"act_quantization_calibration_method", N, "", kOff},
    {"bwd_quantization_calibration_method", N, "", kOff},
    {"drhs_grad_quantization_calibration_method", N, "", kOff},
    {"quantization_local_shard_count", N, "", kOff},
    {"weight_sparsity_n", F, "None"},
    {"weight_sparsity_m", F, "None"},
    {"weight_sparsity_update_step", N, "", kOff},
    {"weight_sparsity_start_step", N, "", kOff},
    {"te_comm_gemm_overlap", N, "", kKernel},
    {"decoder_block", I},
    {"weight_dtype", I},
    {"unquantized_modules", F, "[]"},
    {"weight_block_size", F, "None"},
    {"global_parameter_scale", F, "1"},
    {"base_emb_dim", I},
    {"base_num_query_heads", I},
    {"base_num_kv_heads", I},
    {"base_mlp_dim", I},
    {"dense_init_scale", I},
    {"base_num_decoder_layers", I},
    {"head_dim", I},
    {"attention_output_dim", F, "-1"},
    {"global_head_dim", I},
    {"global_num_kv_heads", I},
    {"mlp_activations", F, "[\"gelu\", \"linear\"]",
     "the MLPs are GeGLU: gelu (tanh form) on the gate times the linear up projection"},
    {"mlp_activations_limit", F, "-1.0"},
    {"dropout_rate", F, "0.0", "no dropout"},
    {"logits_via_embedding", F, "true",
     "the output head is the embedding table, transposed (tied)"},
    {"normalize_embedding_logits", F, "true",
     "the head is the plain embedding table (MaxText stores it times sqrt(D) and divides the "
     "logits back: the same logits; embedding_table=maxtext, the default, trains it in MaxText's units)"},
    {"logits_dot_in_fp32", I},
    {"cast_logits_to_fp32", F, "true", "the loss reads the logits in fp32"},
    {"float32_qk_product", I},
    {"float32_logits", I},
    {"mla_qk_head_chunk_size", N, "", kKernel},
    {"csa_qk_head_chunk_size", N, "", kKernel},
    {"float32_weight_sum", I},
    {"float32_gate_logits", I},
    {"mtp_num_layers", F, "0"},
    {"mtp_loss_scaling_factor", N, "", kOff},
    {"mtp_eval_target_module", N, "", kOff},
    {"mtp_reuse_input_embedding", N, "", kOff},
    {"num_experts", I},
    {"num_experts_per_tok", I},
    {"megablox", F, "true",
     "the experts run as grouped matmuls over the sorted tokens (gemmax's own kernels)"},
    {"sparse_matmul", F, "true",
     "tokens are sorted by expert and run through grouped matmuls: no capacity, no token dropping"},
    {"capacity_factor", F, "-1.0", "dropless routing: every token reaches its top-k experts"},
    {"num_moe_token_chunks", N, "", kKernel},
    {"moe_chunk_barrier", N, "", kKernel},
    {"moe_log_max_load_ratio", N, "", kKernel},
    {"ragged_buffer_factor", N, "", kKernel},
    {"eval_ragged_buffer_factor", N, "", kKernel},
    {"moe_dropless_fallback", N, "", kKernel},
    {"retry_dropless_first_steps", N, "", kKernel},
    {"first_phase_ragged_buffer_factor", N, "", kKernel},
    {"log_required_ragged_buffer_factor", N, "", kKernel},
    {"warmup_programs_in_init", N, "", kKernel},
    {"log_step_diagnostics", N, "", kKernel},
    {"moe_expert_input_dim", F, "-1"},
    {"base_moe_mlp_dim", I},
    {"load_balance_loss_weight", I},
    {"moe_use_megatron_seq_aux_loss", F, "false"},
    {"use_random_routing", F, "false"},
    {"use_custom_sort_vjp", N, "", kKernel},
    {"router_topk_matmul_vjp", N, "", kKernel},
    {"use_ring_of_experts", F, "false"},
    {"moe_topk_before_ep_all_gather", N, "", kKernel},
    {"te_moe_block", N, "", kKernel},
    {"te_ep_overflow_check_every_n_steps", N, "", kKernel},
    {"te_gmm_quantization", N, "", kKernel},
    {"moe_quantize_token_all_gather", N, "", kKernel},
    {"moe_quantize_combine_bwd_method", N, "", kKernel},
    {"num_moe_emb_chunks", N, "", kKernel},
    {"moe_dispatch_no_expert_sharding", N, "", kKernel},
    {"use_ragged_sort", N, "", kKernel},
    {"moe_use_direct_token_gather", N, "", kKernel},
    {"use_gather_mosaic_kernel", N, "", kKernel},
    {"ragged_gather_fallback", N, "", kKernel},
    {"ragged_gather_reduce_fallback", N, "", kKernel},
    {"ragged_gather_cost_estimate_flops", N, "", kKernel},
    {"ragged_gather_reduce_cost_estimate_flops", N, "", kKernel},
    {"ragged_gather_cost_estimate_bytes_accessed", N, "", kKernel},
    {"ragged_gather_reduce_cost_estimate_bytes_accessed", N, "", kKernel},
    {"moe_pin_sparse_core_all_gathers", N, "", kKernel},
    {"moe_pin_sparse_core_ep_all_gathers", N, "", kKernel},
    {"moe_pin_sparse_core_fsdp_all_gathers", N, "", kKernel},
    {"moe_pin_sparse_core_fsdp_all_gathers_fwd_only", N, "", kKernel},
    {"moe_fsdp_all_gather_sparse_core_id", N, "", kKernel},
    {"moe_ep_all_gather_sparse_core_id", N, "", kKernel},
    {"wi_tile_fwd_batch_seq", N, "", kKernel},
    {"wi_tile_fwd_embed_dim", N, "", kKernel},
    {"wi_tile_fwd_mlp_dim", N, "", kKernel},
    {"eval_wi_tile_fwd_batch_seq", N, "", kKernel},
    {"eval_wi_tile_fwd_embed_dim", N, "", kKernel},
    {"eval_wi_tile_fwd_mlp_dim", N, "", kKernel},
    {"wi_tile_dlhs_batch_seq", N, "", kKernel},
    {"wi_tile_dlhs_embed_dim", N, "", kKernel},
    {"wi_tile_dlhs_mlp_dim", N, "", kKernel},
    {"wi_tile_drhs_batch_seq", N, "", kKernel},
    {"wi_tile_drhs_embed_dim", N, "", kKernel},
    {"wi_tile_drhs_mlp_dim", N, "", kKernel},
    {"wo_tile_fwd_batch_seq", N, "", kKernel},
    {"wo_tile_fwd_embed_dim", N, "", kKernel},
    {"wo_tile_fwd_mlp_dim", N, "", kKernel},
    {"eval_wo_tile_fwd_batch_seq", N, "", kKernel},
    {"eval_wo_tile_fwd_embed_dim", N, "", kKernel},
    {"eval_wo_tile_fwd_mlp_dim", N, "", kKernel},
    {"wo_tile_dlhs_batch_seq", N, "", kKernel},
    {"wo_tile_dlhs_embed_dim", N, "", kKernel},
    {"wo_tile_dlhs_mlp_dim", N, "", kKernel},
    {"wo_tile_drhs_batch_seq", N, "", kKernel},
    {"wo_tile_drhs_embed_dim", N, "", kKernel},
    {"wo_tile_drhs_mlp_dim", N, "", kKernel},
    {"merge_gating_gmm", N, "", kKernel},
    {"use_tokamax_gmm", N, "", kKernel},
    {"use_gmm_v2", N, "", kKernel},
    {"use_gmm_v2_heuristic_tiling", N, "", kKernel},
    {"norm_topk_prob", I},
    {"return_routed_experts", N, "", kInference},
    {"moe_fsdp_use_two_stage_all_gather", N, "", kKernel},
    {"shard_exp_on_fsdp", N, "", kKernel},
    {"shard_embed_moe_on_fsdp", N, "", kKernel},
    {"use_2d_fsdp_sharding", N, "", kKernel},
    {"first_num_dense_layers", F, "0"},
    {"shared_experts", F, "1",
     "each MoE layer has one dense GeGLU MLP beside the routed experts (any value when "
     "num_experts=1: no MoE layer)"},
    {"routed_scaling_factor", F, "1.0"},
    {"routed_score_func", F, "\"\""},
    {"routed_bias", F, "false"},
    {"routed_bias_update_rate", N, "", kOff},
    {"defer_small_all_reduces", N, "", kKernel},
    {"mlp_bias", F, "false"},
    {"n_routing_groups", F, "-1"},
    {"first_num_hash_layers", F, "0"},
    {"topk_routing_group", F, "-1"},
    {"use_batch_split_schedule", N, "", kKernel},
    {"batch_split_factor", N, "", kKernel},
    {"use_lineage", N, "", kXla},
    {"inhomogeneous_layer_cycle_interval", F, "1"},
    {"num_layers_per_pipeline_stage", N, "", kOff},
    {"num_pipeline_repeats", N, "", kOff},
    {"pipeline_parallel_layers", N, "", kOff},
    {"num_pipeline_microbatches", N, "", kOff},
    {"pipeline_delay_activation_forwarding", N, "", kOff},
    {"pipeline_fsdp_ag_once", N, "", kOff},
    {"pipeline_fsdp_ag_per_repeat", N, "", kOff},
    {"scan_pipeline_iterations", N, "", kXla},
    {"scan_pipeline_repeats", N, "", kXla},
    {"scan_layers_per_stage", N, "", kXla},
    {"set_remat_policy_on_pipeline_iterations", N, "", kOff},
    {"set_remat_policy_on_layers_per_stage", N, "", kOff},
    {"remat_policy", I},
    {"decoder_layer_input", N, "", kRematCustom},
    {"indexer_cutoff_threshold", N, "", kOff},
    {"context", N, "", kRematCustom},
    {"mlpwi", N, "", kRematCustom},
    {"mlpwi_0", N, "", kRematCustom},
    {"mlpwi_1", N, "", kRematCustom},
    {"mlpwo", N, "", kRematCustom},
    {"moe_mlpwi_0", N, "", kRematCustom},
    {"moe_mlpwi_1", N, "", kRematCustom},
    {"moe_mlpwo", N, "", kRematCustom},
    {"moe_x_sorted", N, "", kRematCustom},
    {"moe_routing_maps", N, "", kRematCustom},
    {"query_proj", N, "", kRematCustom},
    {"key_proj", N, "", kRematCustom},
    {"value_proj", N, "", kRematCustom},
    {"kv_proj", N, "", kRematCustom},
    {"qkv_proj", N, "", kRematCustom},
    {"out_proj", N, "", kRematCustom},
    {"query_wa_proj", N, "", kRematCustom},
    {"kv_wa_proj", N, "", kRematCustom},
    {"mla_q", N, "", kRematCustom},
    {"mla_kv", N, "", kRematCustom},
    {"attention_out", N, "", kRematCustom},
    {"engram", N, "", kRematCustom},
    {"optimizer_memory_host_offload", F, "false"},
    {"parameter_memory_host_offload", F, "false"},
    {"scan_layers", N, "", kXla},
    {"param_scan_axis", N, "", kXla},
    {"attention", I},
    {"attention_type", N, "", kBlock},
    {"share_kv_projections", I},
    {"attention_bias", F, "false"},
    {"attention_sink", F, "false"},
    {"sliding_window_size", I},
    {"chunk_attn_window_size", N, "", kOff},
    {"causal_block_size", N, "", kOff},
    {"attn_logits_soft_cap", F, "0.0",
     "no soft cap on attention logits (Gemma-4 caps only the final logits)"},
    {"final_logits_soft_cap", I},
    {"z_loss_multiplier", F, "0.0", "no z-loss"},
    {"use_post_attn_norm", F, "true",
     "every layer normalises the attention output before the residual add"},
    {"use_post_ffw_norm", F, "true",
     "every layer normalises the MLP output before the residual add"},
    {"v_norm_with_scale", F, "false", "V is RMS-normalised without a learned scale"},
    {"qk_norm_with_scale", F, "true", "q and k RMSNorms have learned scales"},
    {"mla_naive_kvcache", N, "", kInference},
    {"hidden_size_per_layer_input", I},
    {"vocab_size_per_layer_input", I},
    {"num_kv_shared_layers", I},
    {"use_double_wide_mlp", I},
    {"moba", F, "false"},
    {"moba_chunk_size", N, "", kOff},
    {"moba_topk", N, "", kOff},
    {"use_indexer", F, "false"},
    {"indexer_head_dim", N, "", kOff},
    {"indexer_n_heads", N, "", kOff},
    {"indexer_topk", N, "", kOff},
    {"indexer_use_approx_top_k", N, "", kOff},
    {"indexer_approx_top_k_recall", N, "", kOff},
    {"indexer_mask_exact_topk", N, "", kOff},
    {"indexer_sparse_training", N, "", kOff},
    {"indexer_loss_scaling_factor", N, "", kOff},
    {"q_lora_rank", N, "", kOff},
    {"kv_lora_rank", N, "", kOff},
    {"qk_nope_head_dim", N, "", kOff},
    {"qk_rope_head_dim", N, "", kOff},
    {"v_head_dim", N, "", kOff},
    {"use_sliced_mla_proj", N, "", kKernel},
    {"use_mla_absorbed_mqa", N, "", kKernel},
    {"o_lora_rank", N, "", kOff},
    {"o_groups", N, "", kOff},
    {"compress_ratios", N, "", kOff},
    {"compressed_rope_max_timescale", N, "", kOff},
    {"use_csa_streamindex_kernel", N, "", kKernel},
    {"use_qk_clip", F, "false"},
    {"qk_clip_threshold", N, "", kOff},
    {"fused_qkv", F, "false"},
    {"fused_mlp", N, "", kKernel},
    {"record_internal_nn_metrics", N, "", kProfiler},
    {"base_output_directory", I},
    {"enable_mllog", N, "", kCloud},
    {"mllog_file", N, "", kCloud},
    {"enable_multi_tier_checkpointing", N, "", kCheckpointStorage},
    {"multi_tier_checkpointing_backup_interval_minutes", N, "", kCheckpointStorage},
    {"multi_tier_checkpointing_backup_interval_steps", N, "", kCheckpointStorage},
    {"mtc_data_parallelism", N, "", kCheckpointStorage},
    {"enable_emergency_checkpoint", N, "", kCheckpointStorage},
    {"local_checkpoint_directory", N, "", kCheckpointStorage},
    {"local_checkpoint_period", N, "", kCheckpointStorage},
    {"jax_cache_dir", N, "", kCloud},
    {"hardware", N, "", kXla},
    {"internal_compile", N, "", kXla},
    {"internal_compile_num_devices", N, "", kXla},
    {"compile_xla_flags", N, "", kXla},
    {"shard_mode", N, "", kXla},
    {"custom_mesh_and_rule", N, "", kXla},
    {"mesh_axes", N, "", kXla},
    {"logical_axis_rules", N, "", kXla},
    {"data_sharding", N, "", kXla},
    {"input_data_sharding_logical_axes", N, "", kXla},
    {"context_sharding", N, "", kXla},
    {"ulysses_context_sharding", N, "", kXla},
    {"custom_mesh_and_rule_for_eval", N, "", kXla},
    {"logical_axis_rules_for_eval", N, "", kXla},
    {"sharding_tolerance", N, "", kXla},
    {"dcn_diloco_parallelism", F, "1"},
    {"dcn_data_parallelism", F, "-1"},
    {"dcn_fsdp_parallelism", F, "1"},
    {"dcn_fsdp_transpose_parallelism", F, "1"},
    {"dcn_sequence_parallelism", F, "1"},
    {"dcn_context_parallelism", F, "1"},
    {"dcn_context_usp_ulysses_parallelism", F, "1"},
    {"dcn_context_autoregressive_parallelism", F, "1"},
    {"dcn_tensor_parallelism", F, "1"},
    {"dcn_tensor_sequence_parallelism", F, "1"},
    {"dcn_pipeline_parallelism", F, "1"},
    {"dcn_expert_parallelism", F, "1"},
    {"dcn_autoregressive_parallelism", F, "1"},
    {"ici_diloco_parallelism", F, "1"},
    {"ici_data_parallelism", F, "1"},
    {"ici_fsdp_parallelism", I},
    {"ici_fsdp_transpose_parallelism", F, "1"},
    {"ici_sequence_parallelism", F, "1"},
    {"ici_context_parallelism", F, "1"},
    {"ici_context_usp_ulysses_parallelism", F, "1"},
    {"ici_context_autoregressive_parallelism", F, "1"},
    {"ici_tensor_parallelism", F, "1",
     "FSDP over all ranks is the only parallelism (ici_fsdp_parallelism)"},
    {"ici_tensor_sequence_parallelism", F, "1"},
    {"ici_autoregressive_parallelism", F, "1"},
    {"ici_pipeline_parallelism", F, "1"},
    {"ici_expert_parallelism", F, "1"},
    {"check_vma", N, "", kXla},
    {"shard_optimizer_over_data", N, "", kKernel},
    {"dense_fsdp_use_two_stage_all_gather", N, "", kKernel},
    {"num_slices", N, "", kXla},
    {"num_vocab_tiling", I},
    {"vocab_tiling_ag_once", N, "", kKernel},
    {"vocab_size", I},
    {"tokenizer_path", I},
    {"tokenizer_type", I},
    {"use_chat_template", F, "false"},
    {"chat_template_path", N, "", kChatTemplate},
    {"chat_template", N, "", kChatTemplate},
    {"tokenize_train_data", F, "true"},
    {"tokenize_eval_data", N, "", kOff},
    {"add_bos", F, "true"},
    {"add_eos", F, "true"},
    {"use_truncation", I},
    {"per_device_batch_size", I},
    {"expansion_factor_real_data", N, "", kOff},
    {"eval_per_device_batch_size", I},
    {"max_corpus_chars", N, "", kOff},
    {"train_data_columns", N, "", kOff},
    {"train_image_column", N, "", kMultimodal},
    {"eval_data_columns", N, "", kOff},
    {"eval_image_column", N, "", kMultimodal},
    {"default_prompt", N, "", kInference},
    {"packing", I},
    {"use_stream_chunking", N, "", kOff},
    {"num_epoch", N, "", kDataPipeline},
    {"generate_padding_batch_train", N, "", kOff},
    {"generate_padding_batch_eval", N, "", kOff},
    {"max_segments_per_seq", F, "-1"},
    {"enable_rampup_batch_size", F, "false"},
    {"per_device_batch_size_start", N, "", kOff},
    {"per_device_batch_size_increment", N, "", kOff},
    {"global_rampup_samples", N, "", kOff},
    {"use_dpo", F, "false"},
    {"use_sft", F, "false"},
    {"sft_train_on_completion_only", I},
    {"dataset_type", I},
    {"dataset_path", I},
    {"dataset_name", N, "", kOff},
    {"eval_dataset_name", N, "", kOff},
    {"train_split", N, "", kOff},
    {"eval_split", N, "", kOff},
    {"hf_path", N, "", kOff},
    {"hf_name", N, "", kOff},
    {"hf_data_dir", N, "", kOff},
    {"hf_train_files", N, "", kOff},
    {"hf_eval_split", N, "", kOff},
    {"hf_eval_files", N, "", kOff},
    {"hf_access_token", N, "", kCloud},
    {"grain_train_files", N, "", kOff},
    {"grain_eval_files", N, "", kOff},
    {"grain_train_mixture_config_path", N, "", kOff},
    {"grain_file_type", N, "", kOff},
    {"grain_packing_type", I},
    {"grain_worker_count", N, "", kOff},
    {"grain_per_worker_buffer_size", N, "", kOff},
    {"grain_num_threads", N, "", kOff},
    {"grain_prefetch_buffer_size", N, "", kOff},
    {"grain_worker_count_eval", N, "", kOff},
    {"grain_per_worker_buffer_size_eval", N, "", kOff},
    {"grain_ram_budget_mb", N, "", kOff},
    {"grain_num_threads_eval", N, "", kOff},
    {"grain_prefetch_buffer_size_eval", N, "", kOff},
    {"grain_data_source_max_workers", N, "", kOff},
    {"grain_index_storage_option", N, "", kOff},
    {"grain_shuffle_buffer_size", I},
    {"grain_use_elastic_iterator", N, "", kOff},
    {"mmap_eod_id", N, "", kOff},
    {"blend_cache_dir", N, "", kOff},
    {"blend_index_dir", N, "", kOff},
    {"reset_attention_mask", F, "true"},
    {"eod_mask_loss", F, "false"},
    {"packing_max_segments_per_sample", N, "", kOff},
    {"mmap_split_sentences", N, "", kOff},
    {"mmap_npy_split", N, "", kOff},
    {"colocated_python_data_input", N, "", kCloud},
    {"olmo_index_path", N, "", kOff},
    {"olmo_path_remap_from", N, "", kOff},
    {"olmo_path_remap_to", N, "", kOff},
    {"olmo_apply_ngram_filter", N, "", kOff},
    {"steps", I},
    {"log_period", I},
    {"max_inflight_computations", N, "", kXla},
    {"training_objective", F, "\"causal_lm\""},
    {"block_diffusion_mask_id", N, "", kOff},
    {"block_diffusion_min_noise", N, "", kOff},
    {"block_diffusion_logit_alignment", N, "", kOff},
    {"block_diffusion_canvas_policy", N, "", kOff},
    {"jax_distributed_initialization_timeout", N, "", kXla},
    {"jax_debug_log_modules", N, "", kXla},
    {"skip_jax_distributed_system", N, "", kXla},
    {"learning_rate", I},
    {"lr_schedule_type", F, "\"cosine\"", "warmup then cosine decay"},
    {"learning_rate_final_fraction", I, "cosine_learning_rate_final_fraction"},
    {"wsd_decay_steps_fraction", N, "", kOff},
    {"wsd_decay_style", N, "", kOff},
    {"warmup_steps_fraction", I},
    {"learning_rate_schedule_steps", I},
    {"max_target_length", I},
    {"max_prefill_predict_length", N, "", kInference},
    {"prompt", N, "", kInference},
    {"load_from_prefill_dir", N, "", kInference},
    {"prefill_cache_dir", N, "", kInference},
    {"autoregressive_decode_assert", N, "", kInference},
    {"profiler", N, "", kProfiler},
    {"upload_all_profiler_results", N, "", kProfiler},
    {"skip_first_n_steps_for_profiler", N, "", kProfiler},
    {"profiler_steps", N, "", kProfiler},
    {"hide_profiler_step_metric", N, "", kProfiler},
    {"profile_cleanly", N, "", kProfiler},
    {"profile_periodically_period", N, "", kProfiler},
    {"enable_tpu_profiling_options", N, "", kProfiler},
    {"tpu_num_chips_to_profile_per_task", N, "", kProfiler},
    {"tpu_num_sparse_core_tiles_to_trace", N, "", kProfiler},
    {"tpu_num_sparse_cores_to_trace", N, "", kProfiler},
    {"managed_mldiagnostics", N, "", kProfiler},
    {"managed_mldiagnostics_on_demand_profiling", N, "", kProfiler},
    {"managed_mldiagnostics_run_group", N, "", kProfiler},
    {"managed_mldiagnostics_region", N, "", kProfiler},
    {"managed_mldiagnostics_storage_path", N, "", kProfiler},
    {"dump_hlo", N, "", kProfiler},
    {"dump_step", N, "", kProfiler},
    {"dump_hlo_local_dir", N, "", kProfiler},
    {"dump_hlo_delete_local_after", N, "", kProfiler},
    {"dump_hlo_gcs_dir", N, "", kProfiler},
    {"dump_hlo_local_module_name", N, "", kProfiler},
    {"dump_hlo_module_name", N, "", kProfiler},
    {"dump_hlo_xla_flags", N, "", kProfiler},
    {"dump_hlo_upload_all", N, "", kProfiler},
    {"dump_jaxpr", N, "", kProfiler},
    {"dump_jaxpr_local_dir", N, "", kProfiler},
    {"dump_jaxpr_delete_local_after", N, "", kProfiler},
    {"dump_jaxpr_gcs_dir", N, "", kProfiler},
    {"enable_dropout", N, "", kNoDropout},
    {"enable_data_shuffling", I},
    {"data_shuffle_seed", I},
    {"init_weights_seed", I},
    {"block_state_before_run_start", N, "", kXla},
    {"warm_input_reshard_before_run_start", N, "", kXla},
    {"train_shard_in_read", N, "", kXla},
    {"train_interleave_cycle_length", N, "", kXla},
    {"enable_diloco", F, "false"},
    {"diloco_sync_period", N, "", kOff},
    {"diloco_outer_lr", N, "", kOff},
    {"diloco_outer_momentum", N, "", kOff},
    {"dcn_bandwidth_limit", F, "\"\""},
    {"dcn_bandwidth_burst", F, "\"10mb\""},
    {"dcn_bandwidth_latency", F, "\"50ms\""},
    {"dcn_bandwidth_interface", F, "\"eth0\""},
    {"enable_streaming_diloco", F, "false"},
    {"num_diloco_fragments", N, "", kOff},
    {"use_sequential_layers", F, "false"},
    {"num_communication_overlapping_steps", N, "", kOff},
    {"communication_overlapping_alpha", N, "", kOff},
    {"gradient_clipping_threshold", I},
    {"gradient_accumulation_steps", F, "1", "one optimizer step per batch"},
    {"opt_type", I},
    {"skip_step_on_spikes", F, "false"},
    {"skip_step_interval", N, "", kOff},
    {"skip_step_scaling_factor", N, "", kOff},
    {"trainable_parameters_mask", F, "[]",
     "every parameter is trained unless gemmax's freeze (a regex over Hugging Face names) says "
     "otherwise"},
    {"adam_b1", I},
    {"adam_b2", I},
    {"adam_eps", I},
    {"adam_eps_root", I},
    {"adam_weight_decay", I},
    {"adamw_mask", F, "[]", "weight decay applies to every trained parameter"},
    {"mu_dtype", F, "\"\""},
    {"muon_type", N, "", kOff},
    {"muon_beta", N, "", kOff},
    {"muon_weight_decay", N, "", kOff},
    {"muon_consistent_rms", N, "", kOff},
    {"muon_include_routers", N, "", kOff},
    {"muon_use_all_to_all", N, "", kOff},
    {"use_iota_embed", F, "false",
     "the embedding lookup reads table rows by token id (a gather), with no one-hot matmul"},
    {"use_untrainable_positional_embedding", F, "false"},
    {"trainable_position_size", F, "-1"},
    {"rope_type", F, "\"default\""},
    {"rope_linear_scaling_factor", N, "", kOff},
    {"rope_use_scale", N, "", kOff},
    {"rope_min_timescale", N, "", kRope},
    {"rope_max_timescale", N, "", kRope},
    {"local_rope_max_timescale", I},
    {"global_rope_max_timescale", I},
    {"global_rope_proportion", I},
    {"local_rope_proportion", I},
    {"max_position_embeddings", N, "", kOff},
    {"original_max_position_embeddings", N, "", kOff},
    {"rope_factor", N, "", kOff},
    {"beta_fast", N, "", kOff},
    {"beta_slow", N, "", kOff},
    {"mscale", N, "", kOff},
    {"rope_interleave", N, "", kOff},
    {"rope_truncate", N, "", kOff},
    {"rope_attention_scaling", N, "", kOff},
    {"rope_pairwise", N, "", kOff},
    {"compiled_trainstep_file", N, "", kXla},
    {"compile_topology", N, "", kXla},
    {"compile_topology_num_slices", N, "", kXla},
    {"write_estimator_result", N, "", kInference},
    {"decode_sampling_strategy", N, "", kInference},
    {"decode_sampling_nucleus_p", N, "", kInference},
    {"decode_sampling_top_k", N, "", kInference},
    {"decode_sampling_temperature", N, "", kInference},
    {"eval_start_step", N, "", kOff},
    {"eval_interval", I},
    {"eval_steps", I},
    {"target_eval_loss", I},
    {"abort_on_nan_loss", I},
    {"abort_on_inf_loss", I},
    {"enable_goodput_recording", N, "", kCloud},
    {"goodput_job_name", N, "", kCloud},
    {"monitor_goodput", N, "", kCloud},
    {"goodput_upload_interval_seconds", N, "", kCloud},
    {"enable_pathways_goodput", N, "", kCloud},
    {"monitor_step_time_deviation", N, "", kCloud},
    {"step_deviation_interval_seconds", N, "", kCloud},
    {"enable_gcp_goodput_metrics", N, "", kCloud},
    {"enable_gcp_step_deviation_metrics", N, "", kCloud},
    {"report_heartbeat_metric_for_gcp_monitoring", N, "", kCloud},
    {"heartbeat_reporting_interval_in_seconds", N, "", kCloud},
    {"report_performance_metric_for_gcp_monitoring", N, "", kCloud},
    {"enable_tensorboard", I},
    {"use_vertex_tensorboard", N, "", kCloud},
    {"vertex_tensorboard_project", N, "", kCloud},
    {"vertex_tensorboard_region", N, "", kCloud},
    {"max_checkify", N, "", kProfiler},
    {"inference_microbenchmark_prefill_lengths", N, "", kInference},
    {"inference_microbenchmark_stages", N, "", kInference},
    {"inference_microbenchmark_loop_iters", N, "", kInference},
    {"inference_microbenchmark_log_file_path", N, "", kInference},
    {"inference_microbenchmark_num_samples", N, "", kInference},
    {"inference_metadata_file", N, "", kInference},
    {"inference_server", N, "", kInference},
    {"prefill_slice", N, "", kInference},
    {"generate_slice", N, "", kInference},
    {"inference_benchmark_test", N, "", kInference},
    {"enable_model_warmup", N, "", kInference},
    {"enable_llm_inference_pool", N, "", kInference},
    {"multi_sampling", N, "", kInference},
    {"return_log_prob", N, "", kInference},
    {"stack_prefill_result_cache", N, "", kInference},
    {"prefill_cache_axis_order", N, "", kInference},
    {"ar_cache_axis_order", N, "", kInference},
    {"compute_axis_order", N, "", kInference},
    {"reshape_q", N, "", kInference},
    {"prometheus_port", N, "", kCloud},
    {"enable_jax_profiler", N, "", kProfiler},
    {"jax_profiler_port", N, "", kProfiler},
    {"xprof_tpu_power_trace_level", N, "", kProfiler},
    {"xprof_e2e_enable_fw_throttle_event", N, "", kProfiler},
    {"xprof_e2e_enable_fw_power_level_event", N, "", kProfiler},
    {"xprof_e2e_enable_fw_thermal_event", N, "", kProfiler},
    {"profile_power_events", N, "", kProfiler},
    {"log_config", N, "", kProfiler},
    {"debug_sharding", N, "", kProfiler},
    {"enable_checkpoint_cloud_logger", N, "", kCloud},
    {"enable_single_controller", N, "", kCloud},
    {"custom_mesh", N, "", kXla},
    {"allow_split_physical_axes", N, "", kXla},
    {"optimize_mesh_for_tpu_v6e", N, "", kXla},
    {"shardy", N, "", kXla},
    {"remove_size_one_mesh_axis_from_type", N, "", kXla},
    {"use_ragged_attention", N, "", kInference},
    {"ragged_block_size", N, "", kInference},
    {"sa_block_q", N, "", kKernel},
    {"sa_block_kv", N, "", kKernel},
    {"sa_block_kv_compute", N, "", kKernel},
    {"eval_sa_block_q", N, "", kKernel},
    {"eval_sa_block_kv", N, "", kKernel},
    {"eval_sa_block_kv_compute", N, "", kKernel},
    {"sa_block_q_dkv", N, "", kKernel},
    {"sa_block_kv_dkv", N, "", kKernel},
    {"sa_block_kv_dkv_compute", N, "", kKernel},
    {"sa_block_q_dq", N, "", kKernel},
    {"sa_block_kv_dq", N, "", kKernel},
    {"sa_use_fused_bwd_kernel", N, "", kKernel},
    {"sa_bwd_dkv_megacore", N, "", kKernel},
    {"sa_q_layout", N, "", kKernel},
    {"sa_k_layout", N, "", kKernel},
    {"sa_v_layout", N, "", kKernel},
    {"eval_sa_q_layout", N, "", kKernel},
    {"eval_sa_k_layout", N, "", kKernel},
    {"eval_sa_v_layout", N, "", kKernel},
    {"use_splash_scheduler", N, "", kKernel},
    {"ring_scan_unroll", N, "", kKernel},
    {"sa_fuse_reciprocal", N, "", kKernel},
    {"sa_use_base2_exp", N, "", kKernel},
    {"local_sa_block_q", N, "", kKernel},
    {"local_sa_block_kv", N, "", kKernel},
    {"local_sa_block_kv_compute", N, "", kKernel},
    {"eval_local_sa_block_q", N, "", kKernel},
    {"eval_local_sa_block_kv", N, "", kKernel},
    {"eval_local_sa_block_kv_compute", N, "", kKernel},
    {"local_sa_block_q_dkv", N, "", kKernel},
    {"local_sa_block_kv_dkv", N, "", kKernel},
    {"local_sa_block_kv_dkv_compute", N, "", kKernel},
    {"local_sa_block_q_dq", N, "", kKernel},
    {"local_sa_block_kv_dq", N, "", kKernel},
    {"local_sa_use_fused_bwd_kernel", N, "", kKernel},
    {"local_sa_q_layout", N, "", kKernel},
    {"local_sa_k_layout", N, "", kKernel},
    {"local_sa_v_layout", N, "", kKernel},
    {"eval_local_sa_q_layout", N, "", kKernel},
    {"eval_local_sa_k_layout", N, "", kKernel},
    {"eval_local_sa_v_layout", N, "", kKernel},
    {"local_use_splash_scheduler", N, "", kKernel},
    {"local_sa_fuse_reciprocal", N, "", kKernel},
    {"local_sa_use_base2_exp", N, "", kKernel},
    {"experimental_sa_quant_q_fp8", N, "", kKernel},
    {"experimental_sa_quant_k_fp8", N, "", kKernel},
    {"use_max_logit_estimate", N, "", kKernel},
    {"cost_estimate_flops_fwd", N, "", kKernel},
    {"cost_estimate_flops_bwd", N, "", kKernel},
    {"dq_reduction_steps", N, "", kKernel},
    {"context_parallel_load_balance", N, "", kOff},
    {"context_parallel_strategy", N, "", kOff},
    {"context_parallel_reorder_strategy", N, "", kOff},
    {"prefill_chunk_size", N, "", kInference},
    {"use_chunked_prefill", N, "", kInference},
    {"enable_prefix_caching", N, "", kInference},
    {"prefix_caching_hbm_byte", N, "", kInference},
    {"prefix_caching_dram_byte", N, "", kInference},
    {"enable_padding_causal_mask", N, "", kInference},
    {"use_qk_norm", N, "", kBlock},
    {"nope_layer_interval", F, "-1"},
    {"interleave_moe_layer_step", F, "1"},
    {"temperature_tuning", F, "false"},
    {"use_multimodal", F, "false",
     "text only: the vision and audio towers are not built, and their keys are ignored"},
    {"use_audio", N, "", kMultimodal},
    {"freeze_vision_encoder_params", N, "", kMultimodal},
    {"freeze_audio_encoder_params", N, "", kMultimodal},
    {"dtype_mm", N, "", kMultimodal},
    {"remat_policy_for_vit", N, "", kMultimodal},
    {"image_size_for_vit", N, "", kMultimodal},
    {"image_path", N, "", kMultimodal},
    {"video_path", N, "", kMultimodal},
    {"audio_path", N, "", kMultimodal},
    {"image_placeholder", N, "", kMultimodal},
    {"video_placeholder", N, "", kMultimodal},
    {"audio_placeholder", N, "", kMultimodal},
    {"use_audio_in_video", N, "", kMultimodal},
    {"video_max_grid_t", N, "", kMultimodal},
    {"video_max_grid_h", N, "", kMultimodal},
    {"video_max_grid_w", N, "", kMultimodal},
    {"posemb_type_for_vit", N, "", kMultimodal},
    {"max_num_images_per_example", N, "", kMultimodal},
    {"vision_output_length", N, "", kMultimodal},
    {"hidden_size_for_vit", N, "", kMultimodal},
    {"intermediate_size_for_vit", N, "", kMultimodal},
    {"num_attention_heads_for_vit", N, "", kMultimodal},
    {"num_channels_for_vit", N, "", kMultimodal},
    {"tile_size_for_vit", N, "", kMultimodal},
    {"patch_size_for_vit", N, "", kMultimodal},
    {"conv_stride_for_vit", N, "", kMultimodal},
    {"num_hidden_layers_for_vit", N, "", kMultimodal},
    {"projector_input_dim_for_vit", N, "", kMultimodal},
    {"projector_output_dim_for_vit", N, "", kMultimodal},
    {"rope_theta_for_vit", N, "", kMultimodal},
    {"vision_output_dim_for_vit", N, "", kMultimodal},
    {"pixel_shuffle_ratio_for_vit", N, "", kMultimodal},
    {"projector_dropout_for_vit", N, "", kMultimodal},
    {"spatial_merge_size_for_vit", N, "", kMultimodal},
    {"out_hidden_size_for_vit", N, "", kMultimodal},
    {"temporal_patch_size_for_vit", N, "", kMultimodal},
    {"num_position_embeddings_for_vit", N, "", kMultimodal},
    {"deepstack_visual_indexes_for_vit", N, "", kMultimodal},
    {"d_model_for_audio", N, "", kMultimodal},
    {"encoder_attention_heads_for_audio", N, "", kMultimodal},
    {"encoder_ffn_dim_for_audio", N, "", kMultimodal},
    {"encoder_layers_for_audio", N, "", kMultimodal},
    {"attention_dropout_for_audio", N, "", kMultimodal},
    {"activation_dropout_for_audio", N, "", kMultimodal},
    {"activation_function_for_audio", N, "", kMultimodal},
    {"num_mel_bins_for_audio", N, "", kMultimodal},
    {"max_source_positions_for_audio", N, "", kMultimodal},
    {"scale_embedding_for_audio", N, "", kMultimodal},
    {"n_window_for_audio", N, "", kMultimodal},
    {"n_window_infer_for_audio", N, "", kMultimodal},
    {"conv_chunksize_for_audio", N, "", kMultimodal},
    {"downsample_hidden_size_for_audio", N, "", kMultimodal},
    {"output_dim_for_audio", N, "", kMultimodal},
    {"num_conv_layers_for_audio", N, "", kMultimodal},
    {"max_timescale_for_audio", N, "", kMultimodal},
    {"max_sample_len_for_audio", N, "", kMultimodal},
    {"use_mrope", N, "", kMultimodal},
    {"mrope_section", N, "", kMultimodal},
    {"position_id_per_seconds", N, "", kMultimodal},
    {"subslice_shape", N, "", kXla},
    {"gdn_conv_kernel_dim", N, "", kOff},
    {"gdn_key_head_dim", N, "", kOff},
    {"gdn_value_head_dim", N, "", kOff},
    {"gdn_num_key_heads", N, "", kOff},
    {"gdn_num_value_heads", N, "", kOff},
    {"gdn_chunk_size", N, "", kOff},
    {"use_qk_norm_in_gdn", N, "", kOff},
    {"partial_rotary_factor", N, "", kOff},
    {"use_tokamax_splash", N, "", kKernel},
    {"use_jax_splash", N, "", kKernel},
    {"vllm_hf_config_path", N, "", kInference},
    {"vllm_hf_overrides", N, "", kInference},
    {"vllm_additional_config", N, "", kInference},
    {"use_weight_converter", N, "", kInference},
    {"rollout_tensor_parallelism", N, "", kInference},
    {"rollout_backend", N, "", kInference},
    {"kv_tp_size", N, "", kInference},
    {"moe_mlp_tp_size", N, "", kInference},
    {"weight_sync_debug", N, "", kInference},
    {"use_raiden_ffi", N, "", kInference},
    {"vllm_load_format", N, "", kInference},
    {"force_q_layout", N, "", kInference},
    {"mhc_expansion_rate", N, "", kOff},
    {"sinkhorn_iterations", N, "", kOff},
    {"enable_mhc_lite", F, "false"},
    {"use_mhc_pallas_kernel", N, "", kKernel},
    {"mhc_pallas_kernel_fwd_block_size", N, "", kKernel},
    {"mhc_pallas_kernel_bwd_block_size", N, "", kKernel},
    {"mhc_pallas_kernel_bwd_feature_block_size", N, "", kKernel},
    {"engram_layers", N, "", kOff},
    {"engram_max_ngram_size", N, "", kOff},
    {"engram_num_heads", N, "", kOff},
    {"engram_head_dim", N, "", kOff},
    {"engram_vocab_bases", N, "", kOff},
    {"engram_kernel_size", N, "", kOff},
    {"engram_seed", N, "", kOff},
    {"distill_alpha", N, "", kOff},
    {"distill_temperature", N, "", kOff},
    {"distill_beta", N, "", kOff},
    {"distill_feature_loss_type", N, "", kOff},
    {"distill_layer_indices", N, "", kOff},
    {"distill_alpha_end", N, "", kOff},
    {"distill_alpha_schedule", N, "", kOff},
    {"distill_temperature_end", N, "", kOff},
    {"distill_temperature_schedule", N, "", kOff},
    {"distill_beta_end", N, "", kOff},
    {"distill_beta_schedule", N, "", kOff},
    {"elastic_enabled", N, "", kCloud},
    {"elastic_backup_kind", N, "", kCloud},
    {"elastic_timeout_seconds", N, "", kCloud},
    {"elastic_max_retries", N, "", kCloud},
    {"elastic_min_slice_count", N, "", kCloud},
    {"vision_encoder_block", N, "", kMultimodal},
};

// A JSON string (bytes that are not UTF-8 are replaced: this text only compares and reports).
std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string canonical_node(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsSequence()) {
    std::string out = "[";
    for (size_t i = 0; i < n.size(); ++i) out += (i ? "," : "") + canonical_node(n[i]);
    return out + "]";
  }
  if (n.IsMap()) {
    std::map<std::string, std::string> items;
    for (const auto& kv : n) items[kv.first.Scalar()] = canonical_node(kv.second);
    std::string out = "{";
    for (const auto& [k, v] : items) out += (out.size() > 1 ? "," : "") + k + ":" + v;
    return out + "}";
  }
  const std::string s = n.Scalar();
  // MaxText turns the string None into Python's None wherever it is written.
  if (s == "None" || s == "none" || s == "null" || s == "Null" || s == "NULL" || s == "~")
    return "null";
  if (n.Tag() == "!") return quoted(s);  // quoted: a string
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "true" || lower == "false") return lower;
  // Numbers as YAML 1.1 writes them (10_000, 1.e-05), compared by value.
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit((unsigned char)s[i - 1]) &&
          std::isdigit((unsigned char)s[i + 1])))
      digits += s[i];
  char* end = nullptr;
  const double v = digits.empty() ? 0 : std::strtod(digits.c_str(), &end);
  if (!digits.empty() && end == digits.c_str() + digits.size() && std::isfinite(v) &&
      lower.find_first_of("xp") == std::string::npos) {
    char buf[40];
    if (v == std::floor(v) && std::fabs(v) < 9e15)
      std::snprintf(buf, sizeof buf, "%.0f", v);
    else
      std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
  }
  return quoted(s);
}

std::string code(std::string_view s) { return str_cat("`", s, "`"); }

}  // namespace

std::span<const MaxTextKey> maxtext_keys() { return kKeys; }

const MaxTextKey* find_maxtext_key(std::string_view key) {
  static const auto index = [] {
    std::unordered_map<std::string_view, const MaxTextKey*> m;
    for (const MaxTextKey& k : kKeys) m.emplace(k.key, &k);
    return m;
  }();
  auto it = index.find(key);
  return it == index.end() ? nullptr : it->second;
}

std::string canonical_value(const YAML::Node& node) { return canonical_node(node); }

std::string canonical_value(const std::string& yaml_text) {
  try {
    return canonical_node(YAML::Load(yaml_text));
  } catch (const YAML::Exception&) {
    return quoted(yaml_text);  // not YAML: the text itself, as a string
  }
}

namespace {
constexpr MaxTextModel kModels[] = {
    {"gemma4-26b", "gemma4-26b-a4b", "trained: the MoE, 30 layers, 128 experts top-8"},
    {"gemma4-31b", "gemma4-31b",
     "trained: the dense model, 60 layers, d_model 5376, MLP 21504, no MoE (num_experts=1)"},
    {"gemma4-e2b", "gemma4-e2b",
     "trained: the gemma4_small block, 35 layers, d_model 1536, per-layer inputs of 256, the last "
     "20 layers on earlier layers' K/V with a double-wide MLP"},
    {"gemma4-e4b", "gemma4-e4b",
     "trained: the gemma4_small block, 42 layers, d_model 2560, per-layer inputs of 256, the last "
     "18 layers on earlier layers' K/V"},
};
}  // namespace

std::span<const MaxTextModel> maxtext_models() { return kModels; }

std::string maxtext_doc_markdown() {
  auto count = [](KeyClass c) {
    return std::count_if(std::begin(kKeys), std::end(kKeys),
                         [&](const MaxTextKey& k) { return k.cls == c; });
  };
  std::string md =
      "<!-- Generated by `gemmax info --maxtext-doc` from src/gemmax/config/maxtext_keys.cc;\n"
      "     edit the table there, then regenerate (a test fails while the two differ). -->\n"
      "# MaxText's configuration in gemmax\n\n"
      "gemmax reads MaxText's configuration as MaxText reads it: its `configs/base.yml`, its\n"
      "`configs/models/<name>.yml` files and its `key=value` command lines, lists included.\n"
      "A MaxText command line runs with `gemmax train` in place of MaxText's trainer:\n\n"
      "```sh\n"
      "gemmax train maxtext/configs/base.yml model_name=gemma4-26b per_device_batch_size=2 \\\n"
      "    max_target_length=16384 ici_fsdp_parallelism=128 remat_policy=full \\\n"
      "    sparse_matmul=true megablox=true use_iota_embed=false num_vocab_tiling=16 \\\n"
      "    dataset_type=synthetic dry_run=true\n"
      "gemmax train maxtext/configs/models/gemma4-26b.yml steps=10 dataset_type=synthetic\n"
      "```\n\n"
      "## How files are read\n\n"
      "- A config file that holds MaxText keys gemmax does not implement (MaxText's `base.yml`,\n"
      "  a copy of it, a model file) is read in MaxText's order: that file, then the model file\n"
      "  of `model_name` (gemmax's preset) over it, then the command line over both. Any other\n"
      "  file is read in gemmax's order: the file and the command line, then the preset filling\n"
      "  only the keys they did not set.\n"
      "- A MaxText model file given as the config file (`models/gemma4-26b.yml`, which names no\n"
      "  model) stands for `model_name=gemma4-26b`; another `model_name` with it is an error.\n"
      "- `model_name: \"default\"` (MaxText's base model, a llama2 block) is not a Gemma-4 model:\n"
      "  set `model_name` to one of the names below.\n"
      "- A key set twice in one file with two different values is an error naming both.\n"
      "- Values are compared as MaxText reads them: `True` is `true`, `10_000` is `10000`, "
      "`1.e-5`\n"
      "  is `1e-05`, `-1.0` is `-1`, `None` is `null`; a whole number written `12.0` is read\n"
      "  by an integer key as `12`.\n\n"
      "## Model names\n\n"
      "| MaxText `model_name` | gemmax preset | in gemmax |\n|---|---|---|\n";
  for (const MaxTextModel& m : kModels)
    md += str_cat("| ", code(m.maxtext_name), " | ", m.preset.empty() ? "(none)" : code(m.preset),
                  " | ", m.preset.empty() ? "not built yet: " : "", m.status, " |\n");
  md +=
      "\ngemmax's own presets (`gemma4-tiny`, `gemma4-small`, `gemma4-26b-a4b`) keep their "
      "names.\n";
  md += str_cat(
      "\n## The keys\n\n"
      "Every key of MaxText's `base.yml` and Gemma-4 model files (MaxText 0.2.5) is in one of\n"
      "three classes. A key in none of them, and not one of gemmax's own (`configs/base.yml`), is\n"
      "an error that suggests a key of near spelling, if there is one.\n\n"
      "### Implemented (",
      count(I),
      ")\n\n"
      "Read with MaxText's meaning; `configs/base.yml` gives gemmax's default and the values it\n"
      "accepts.\n\n");
  std::string plain;
  for (const MaxTextKey& k : kKeys) {
    if (k.cls != I) continue;
    if (k.value.empty() && k.none_means.empty()) {
      plain += (plain.empty() ? "" : ", ") + code(k.key);
      continue;
    }
    md += "- " + code(k.key);
    if (!k.value.empty()) md += str_cat(": read as gemmax's ", code(k.value));
    if (!k.none_means.empty())
      md += str_cat(k.value.empty() ? ": " : "; ", "MaxText's `None` is read as ",
                    code(k.none_means));
    md += "\n";
  }
  md += "- and " + plain + ".\n";
  md += str_cat(
      "\n### Fixed by construction (", count(F),
      ")\n\n"
      "gemmax does one thing where MaxText offers a choice. The key is accepted at the value that\n"
      "says what gemmax does; any other value is an error naming the key, the value and what\n"
      "gemmax does.\n\n"
      "| key | accepted value | what gemmax does |\n|---|---|---|\n");
  for (const MaxTextKey& k : kKeys)
    if (k.cls == F)
      md += str_cat("| ", code(k.key), " | ", code(k.value), " | ",
                    k.note.empty() ? "MaxText's default, the only behaviour gemmax has" : k.note,
                    " |\n");
  md += str_cat(
      "\n### No meaning here (", count(N),
      ")\n\n"
      "Accepted with any value and ignored; `gemmax train` names the ones a run sets in one line\n"
      "at its start.\n\n");
  std::vector<std::string_view> groups;
  for (const MaxTextKey& k : kKeys)
    if (k.cls == N && std::find(groups.begin(), groups.end(), k.note) == groups.end())
      groups.push_back(k.note);
  for (std::string_view g : groups) {
    std::string keys;
    for (const MaxTextKey& k : kKeys)
      if (k.cls == N && k.note == g) keys += (keys.empty() ? "" : ", ") + code(k.key);
    md += str_cat("- **", g, "**: ", keys, ".\n");
  }
  return md;
}

}  // namespace gemmax

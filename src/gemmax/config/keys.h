// Every key gemmax reads, declared once. Each part of a run has one list; each entry is
//
//   X(Type, field, key, default, range, maxtext, help)
//
//   Type     bool, int64_t, double, std::string, or an enum with names (choices.h, DType, and
//            the backends' in backend/backend_options.h)
//   field    the member of the part's struct (train_config.h; the model's in model_config.h)
//   key      the key's name (most are their field's)
//   default  the value of a run that does not set the key (models: what the preset overrides)
//   range    any(), or the numbers a value must lie in: closed(lo, hi) [lo, hi],
//            half_open(lo, hi) [lo, hi), open_closed(lo, hi) (lo, hi], open(lo, hi), and
//            either(v, range): v or the range
//   maxtext  maxtext(): a key of MaxText's with MaxText's meaning; own(): gemmax's own;
//            maxtext_none_is(v): a MaxText key whose None means v
//   help     one line: what the key does, its values, and its special values
//
// From these lists come the parts' fields, parsing and range checks (keys.cc), configs/base.yml
// and docs/MAXTEXT.md (`gemmax info --keys`, rendered by scripts/config_docs.py). A MaxText key
// gemmax does not implement is in maxtext_keys.cc instead. Adding a key touches its entry here
// and the code that uses it.
#pragma once

// clang-format off

// The training loop: its folder, steps and schedule, initialisation, non-finite steps, logging,
// the closing sample.
#define GEMMAX_RUN_KEYS(X)                                                                          \
  X(std::string, run_name, run_name, "gemmax_run", any(), maxtext(),                               \
    "the run's folder: base_output_directory/run_name/")                                            \
  X(std::string, base_output_directory, base_output_directory, "out", any(), maxtext(),            \
    "the folder that holds the runs' folders")                                                      \
  X(int64_t, steps, steps, 1500, closed(0, kI64), maxtext(), "the number of training steps")      \
  X(double, learning_rate, learning_rate, 3.0e-3, open_closed(0, 1), maxtext(),                    \
    "the peak rate of AdamW's updates; a negative one climbs the loss, above 1 every step moves "  \
    "weights by more than their scale")                                                            \
  X(int64_t, learning_rate_schedule_steps, learning_rate_schedule_steps, -1,                       \
    either(-1, closed(1, kI64)), maxtext(), "the length of the schedule; -1: equal to steps")      \
  X(double, warmup_steps_fraction, warmup_steps_fraction, 0.1, closed(0, 1), maxtext(),            \
    "the fraction of the schedule spent warming up")                                                \
  X(double, cosine_learning_rate_final_fraction, cosine_learning_rate_final_fraction, 0.1,         \
    closed(0, 1), own(),                                                                            \
    "the final rate as a fraction of learning_rate; outside [0, 1] the schedule rises or goes "    \
    "negative (MaxText's learning_rate_final_fraction)")                                            \
  X(int64_t, init_weights_seed, init_weights_seed, 0, closed(0, kI64), maxtext(),                  \
    "the seed of the weights of a run that starts from scratch")                                   \
  X(std::string, load_parameters_path, load_parameters_path, "", any(), maxtext(),                 \
    "start from a Hugging Face Gemma-4 folder (fine-tuning); \"\": from scratch")                  \
  X(std::string, freeze, freeze, "", any(), own(),                                                  \
    "a regex: parameters whose Hugging Face name matches are not trained")                         \
  X(bool, abort_on_nan_loss, abort_on_nan_loss, true, any(), maxtext(),                             \
    "a NaN loss stops the run")                                                                     \
  X(bool, abort_on_inf_loss, abort_on_inf_loss, true, any(), maxtext(),                             \
    "an infinite loss stops the run")                                                               \
  X(int64_t, skip_nonfinite_steps, skip_nonfinite_steps, 0, closed(0, kI64), own(),                \
    "a step whose gradient (or, with abort_on_*_loss=false, loss) is NaN or infinite is never "    \
    "applied; the run stops at the first unless this allows skipping up to N of them (per "        \
    "invocation; metrics.jsonl counts them)")                                                       \
  X(double, peak_tflops_per_device, peak_tflops_per_device, 0.0, half_open(0, kInf), own(),        \
    "the device's peak, for MFU; 0: MFU not printed")                                               \
  X(int64_t, log_period, log_period, 1, closed(1, kI64), maxtext(),                                 \
    "print a metrics line every log_period steps")                                                  \
  X(bool, enable_tensorboard, enable_tensorboard, true, any(), maxtext(),                           \
    "write every step's metrics as TensorBoard events too")                                         \
  X(std::string, tensorboard_dir, tensorboard_dir, "", any(), own(),                                \
    "the events' folder; runs may share one (each writes, rewrites and removes only its own "      \
    "files, named for its run folder); \"\": base_output_directory/run_name/tensorboard/")          \
  X(std::string, sample_prompt, sample_prompt, "Once upon a time", any(), own(),                    \
    "the run ends by continuing this prompt (not with synthetic data)")                            \
  X(int64_t, sample_max_new_tokens, sample_max_new_tokens, 80, closed(0, 1 << 20), own(),          \
    "tokens of the closing sample; 0: none")                                                        \
  X(bool, dry_run, dry_run, false, any(), own(),                                                    \
    "gemmax train: print the memory plan and stop, allocating nothing")                            \
  X(double, max_memory_gb, max_memory_gb, 0.0, half_open(0, kInf), own(),                          \
    "refuse a run whose memory plan exceeds this (GiB); 0: no limit")

// The backend: what runs the ops (backend/backend_options.h).
#define GEMMAX_BACKEND_KEYS(X)                                                                      \
  X(BackendKind, backend, backend, BackendKind::Cpu, any(), own(),                                  \
    "cpu (fast kernels) | reference (plain loops, the ground truth) | cuda (NVIDIA Hopper) | "      \
    "cuda_emulated (the cuda kernels run on the host: for tests, slow)")                           \
  X(int64_t, num_threads, num_threads, 0, closed(0, 4096), own(),                                   \
    "threads of the host backends; 0: every core the process may use")                             \
  X(CpuKernels, cpu_kernels, cpu_kernels, CpuKernels::Auto, any(), own(),                           \
    "cpu backend product kernels: auto (per CPU) | amx | amx_emulated | avx512_fp32 | "            \
    "avx512_bf16 | avx2 (docs/PERFORMANCE.md)")                                                     \
  X(std::string, cpu_isa, cpu_isa, "", any(), own(),                                                \
    "cpu_kernels' former name, read from older configs where cpu_kernels is not set; \"\": unset") \
  X(CudaKernels, cuda_kernels, cuda_kernels, CudaKernels::Fast, any(), own(),                       \
    "cuda backend: fast (tensor-core kernels for bfloat16 attention and grouped matmuls) | "       \
    "simple (the plain kernels they are tested against)")                                          \
  X(CudaGmm, cuda_gmm, cuda_gmm, CudaGmm::Mma, any(), own(),                                        \
    "cuda backend, bfloat16 grouped matmuls (forward, dlhs, drhs): mma (mma.sync) | sm90 (TMA + "  \
    "mbarrier + wgmma, sm_90a GPUs only)")                                                          \
  X(CudaAttention, cuda_attention, cuda_attention, CudaAttention::kMma, any(), own(),               \
    "cuda backend, bfloat16 attention (forward and backward): mma (mma.sync) | sm90 (TMA + "       \
    "mbarrier + wgmma, sm_90a GPUs only) | cudnn (cuDNN's fused attention where it takes the "     \
    "shape, else sm90)")                                                                            \
  X(bool, cuda_sync_check, cuda_sync_check, false, any(), own(),                                    \
    "cuda backend: synchronise and check after every kernel, so that a fault names the kernel "    \
    "that faulted (slow; for a first run)")

// The model (ModelConfig). The preset named by model_name sets these; a run may override one.
#define GEMMAX_MODEL_KEYS(X)                                                                        \
  X(std::string, name, model_name, "gemma4-tiny", any(), maxtext(),                                 \
    "a preset in configs/models/: gemma4-tiny, gemma4-small, gemma4-26b-a4b, gemma4-31b (dense), " \
    "gemma4-e2b, gemma4-e4b (the small block); also MaxText's names (docs/MAXTEXT.md)")             \
  X(int64_t, vocab_size, vocab_size, 0, any(), maxtext(), "the vocabulary (HF vocab_size)")         \
  X(int64_t, d_model, base_emb_dim, 0, any(), maxtext(), "the model width (HF hidden_size)")        \
  X(int64_t, num_layers, base_num_decoder_layers, 0, any(), maxtext(),                              \
    "decoder layers (HF num_hidden_layers)")                                                        \
  X(int64_t, num_heads, base_num_query_heads, 0, any(), maxtext(),                                  \
    "query heads (HF num_attention_heads)")                                                         \
  X(int64_t, num_kv_heads, base_num_kv_heads, 0, any(), maxtext(),                                  \
    "key/value heads of the sliding layers (HF num_key_value_heads)")                               \
  X(int64_t, head_dim, head_dim, 0, any(), maxtext(), "head width of the sliding layers")           \
  X(int64_t, global_num_kv_heads, global_num_kv_heads, 0, any(), maxtext(),                         \
    "key/value heads of the global layers (HF num_global_key_value_heads); 0: base_num_kv_heads")  \
  X(int64_t, global_head_dim, global_head_dim, 0, any(), maxtext(), "head width of the global layers") \
  X(int64_t, mlp_dim, base_mlp_dim, 0, any(), maxtext(),                                            \
    "width of the dense GeGLU MLP (HF intermediate_size)")                                          \
  X(int64_t, moe_mlp_dim, base_moe_mlp_dim, 0, any(), maxtext(),                                    \
    "width of each expert (HF moe_intermediate_size)")                                              \
  X(int64_t, num_experts, num_experts, 0, any(), maxtext(),                                         \
    "experts per MoE layer; 1: dense layers, no MoE block")                                         \
  X(int64_t, num_experts_per_tok, num_experts_per_tok, 0, any(), maxtext(),                         \
    "experts each token is routed to (HF top_k_experts)")                                           \
  X(int64_t, sliding_window, sliding_window_size, 0, any(), maxtext(),                              \
    "the sliding layers' window (HF sliding_window)")                                               \
  X(int64_t, sliding_window_pattern, sliding_window_pattern, 6, any(), own(),                       \
    "layer l is global iff l % pattern == pattern - 1; 0: no global layers")                        \
  X(std::string, layer_types, layer_types, "", any(), own(),                                         \
    "each layer's attention as transformers' config.json lists it, comma-separated "               \
    "sliding_attention / full_attention, one per layer (a pruned model's); \"\": the pattern's")    \
  X(double, local_rope_theta, local_rope_max_timescale, 10000.0, any(), maxtext(),                  \
    "RoPE base of the sliding layers")                                                              \
  X(double, global_rope_theta, global_rope_max_timescale, 1000000.0, any(), maxtext(),              \
    "RoPE base of the global layers")                                                               \
  X(double, local_rope_proportion, local_rope_proportion, 1.0, any(), maxtext(),                    \
    "fraction of the sliding layers' head rotated by RoPE")                                         \
  X(double, global_rope_proportion, global_rope_proportion, 0.25, any(), maxtext(),                 \
    "fraction of the global layers' head rotated by RoPE (HF partial_rotary_factor)")               \
  X(bool, share_kv_projections, share_kv_projections, true, any(), maxtext(),                       \
    "global layers use K as V, with no v projection (HF attention_k_eq_v)")                         \
  X(DecoderBlock, decoder_block, decoder_block, DecoderBlock::Gemma4, any(), maxtext(),             \
    "gemma4 (26b, 31b) | gemma4_small (e2b, e4b: the four keys below)")                             \
  X(int64_t, per_layer_input_dim, hidden_size_per_layer_input, 0, any(), maxtext(),                 \
    "gemma4_small: width of each layer's per-layer input; 0: none")                                 \
  X(int64_t, per_layer_vocab, vocab_size_per_layer_input, 0, any(), maxtext(),                      \
    "gemma4_small: rows of the per-layer input table (= vocab_size)")                               \
  X(int64_t, num_kv_shared_layers, num_kv_shared_layers, 0, any(), maxtext(),                       \
    "gemma4_small: the last N layers reuse earlier layers' K/V")                                    \
  X(bool, double_wide_mlp, use_double_wide_mlp, false, any(), maxtext(),                            \
    "gemma4_small: those layers' MLP is 2 x base_mlp_dim wide")                                     \
  X(double, final_logits_soft_cap, final_logits_soft_cap, 30.0, any(), maxtext(),                   \
    "cap * tanh(logits / cap) on the output logits (HF final_logit_softcapping); 0: off")          \
  X(double, norm_eps, normalization_layer_epsilon, 1.0e-6, any(), maxtext(),                        \
    "RMSNorm's epsilon (HF rms_norm_eps)")                                                          \
  X(bool, norm_topk_prob, norm_topk_prob, true, any(), maxtext(),                                   \
    "the router's top-k weights are renormalised to sum to 1")                                      \
  X(double, load_balance_loss_weight, load_balance_loss_weight, 0.001, any(), maxtext(),            \
    "weight of the MoE load-balance loss")                                                          \
  X(LoadBalanceDensity, load_balance_density, load_balance_density, LoadBalanceDensity::PerToken,  \
    any(), own(),                                                                                   \
    "the load-balance loss's expert density: per_token (fraction of a sequence's tokens choosing " \
    "the expert) | per_choice (divided by num_experts_per_tok, MaxText 0.2.5's); "                 \
    "docs/TRAINING.md §7")                                                                          \
  X(InitScheme, init_scheme, init_scheme, InitScheme::MaxText, any(), own(),                        \
    "from scratch: maxtext (MaxText's fan-in variance scaling per kind of kernel) | hf (every "    \
    "matrix N(0, initializer_range^2)); docs/MODEL.md §4.9")                                        \
  X(double, initializer_range, initializer_range, 0.02, any(), own(),                               \
    "init_scheme=hf: the normal's standard deviation")                                              \
  X(double, dense_init_scale, dense_init_scale, 1.0, any(), maxtext(),                              \
    "init_scheme=maxtext: variance scale of the MoE block's kernels (dense MLP, router, experts)")

// The options of a step that the model reads (ModelOptions, model/context.h, holds them too).
#define GEMMAX_MODEL_OPTION_KEYS(X)                                                                 \
  X(int64_t, num_vocab_tiling, num_vocab_tiling, 1, any(), maxtext(),                               \
    "tiles of positions along the sequence in the output head; must divide max_target_length "     \
    "(1: no tiling)")                                                                               \
  X(bool, norm_scale_in_fp32, norm_scale_in_fp32, true, any(), own(),                               \
    "norm scales multiply in fp32 before the one rounding of the output (seed #2; false: round "   \
    "the normalised value to the activation dtype, then multiply in that dtype)")                  \
  X(bool, moe_fuse_permute_combine, moe_fuse_permute_combine, true, any(), own(),                   \
    "permute / un-permute folded into the expert grouped matmuls' row loads and stores (seed "     \
    "Part 2; false: explicit permute and combine gathers)")                                         \
  X(bool, moe_fused_gate_up, moe_fused_gate_up, true, any(), own(),                                 \
    "one grouped matmul over the fused [E, 2F, D] gate_up weight (false: two over its gate and up " \
    "halves)")                                                                                      \
  X(bool, moe_dlhs_in_place, moe_dlhs_in_place, true, any(), own(),                                 \
    "the backward's dlhs reads the expert weights transposed in place (seed Part 3; false: a "     \
    "transposed copy first)")                                                                       \
  X(bool, logits_dot_in_fp32, logits_dot_in_fp32, false, any(), maxtext(),                          \
    "the head's product, logits and their gradient in fp32 with dtype=bfloat16 (the normalised "   \
    "input widened, the fp32 master table; false: bf16 logits)")                                    \
  X(bool, activations_in_float32, activations_in_float32, true, any(), maxtext(),                   \
    "GeGLU's gelu(gate) * up computed wide, one rounding (false: gelu(gate) rounded first, "       \
    "MaxText's default)")                                                                           \
  X(bool, float32_weight_sum, float32_weight_sum, true, any(), maxtext(),                           \
    "the expert combine's weights in fp32 (false: rounded to bf16, and their gradient too, as "    \
    "MaxText's Gemma-4 routing weights are)")                                                       \
  X(bool, float32_gate_logits, float32_gate_logits, false, any(), maxtext(),                        \
    "the router's norm, input and logits in fp32 with dtype=bfloat16, from the fp32 master "       \
    "router matrix (false: bf16, MaxText's default)")

// What a step computes and in what precision.
#define GEMMAX_STEP_KEYS(X)                                                                         \
  X(int64_t, per_device_batch_size, per_device_batch_size, 4, closed(1, kI32), maxtext(),           \
    "rows of max_target_length tokens per device per step")                                        \
  X(int64_t, max_target_length, max_target_length, 256, closed(1, kI32), maxtext(),                 \
    "tokens per row")                                                                               \
  X(DType, dtype, dtype, DType::BF16, any(), maxtext(),                                             \
    "activations and matmul inputs: bfloat16 | float32 | float64 (float32 / float64 run every op " \
    "in that dtype, for checks)")                                                                   \
  X(DType, weight_dtype, weight_dtype, DType::F32, any(), maxtext(),                                \
    "master weights, gradients, Adam moments (equal to dtype, or float32 with dtype=bfloat16)")    \
  X(RematPolicy, remat_policy, remat_policy, RematPolicy::Full, any(), maxtext(),                   \
    "full: keep only each layer's input, re-run its forward in the backward | minimal: also keep " \
    "the matmul outputs | none: keep everything")                                                   \
  X(Attention, attention, attention, Attention::Autoselected, any(), maxtext(),                     \
    "autoselected | flash: flash attention, fp32 scores | dot_product: MaxText's plain attention, " \
    "which the two keys below switch (docs/TRAINING.md §1.2)")                                      \
  X(bool, float32_qk_product, float32_qk_product, false, any(), maxtext(),                          \
    "dot_product: fp32 scores (q and k widened)")                                                   \
  X(bool, float32_logits, float32_logits, false, any(), maxtext(),                                  \
    "dot_product: the bf16 scores widened before the softmax (both false: MaxText's bf16 softmax, " \
    "on the reference and cpu backends)")                                                           \
  GEMMAX_MODEL_OPTION_KEYS(X)

#define GEMMAX_OPTIMIZER_KEYS(X)                                                                    \
  X(OptType, opt_type, opt_type, OptType::AdamW, any(), maxtext(), "adamw")                         \
  X(double, adam_b1, adam_b1, 0.9, half_open(0, 1), maxtext(), "Adam's first-moment decay")         \
  X(double, adam_b2, adam_b2, 0.95, half_open(0, 1), maxtext(), "Adam's second-moment decay")       \
  X(double, adam_eps, adam_eps, 1.0e-8, open(0, kInf), maxtext(),                                   \
    "Adam's denominator term; 0 divides by zero where a gradient is zero")                         \
  X(double, adam_eps_root, adam_eps_root, 0.0, half_open(0, kInf), maxtext(),                       \
    "added under Adam's square root")                                                               \
  X(double, adam_weight_decay, adam_weight_decay, 0.1, closed(0, 1), maxtext(),                     \
    "decoupled weight decay; learning_rate x adam_weight_decay above 1 would flip weights' signs") \
  X(double, gradient_clipping_threshold, gradient_clipping_threshold, 1.0, half_open(0, kInf),      \
    maxtext(), "the global-norm clip; 0 disables clipping")                                         \
  X(EmbeddingTable, embedding_table, embedding_table, EmbeddingTable::MaxText, any(), own(),        \
    "maxtext (Adam trains the table as MaxText stores it, sqrt(D) times HF's: the same model, "    \
    "MaxText's steps on the embedding and head) | hf (Adam trains HF's table); "                   \
    "docs/TRAINING.md §12")

#define GEMMAX_DATA_KEYS(X)                                                                         \
  X(DatasetType, dataset_type, dataset_type, DatasetType::Builtin, any(), maxtext(),                \
    "builtin (generated text) | shards (gemmax token shards) | hf (a Hugging Face dataset on "     \
    "disk: hf_path) | synthetic")                                                                   \
  X(std::string, dataset_path, dataset_path, "", any(), maxtext(),                                  \
    "shards: a .bin shard, a folder of them, or a comma-separated list")                           \
  X(std::string, hf_path, hf_path, "", any(), maxtext(),                                            \
    "hf: the dataset's folder on disk (a hub download's, or datasets.save_to_disk's)")             \
  X(std::string, hf_data_dir, hf_data_dir, "", any(), maxtext(),                                    \
    "hf: a folder inside hf_path holding the files (load_dataset's data_dir)")                     \
  X(std::string, hf_train_files, hf_train_files, "", any(), maxtext(),                              \
    "hf: the training files, comma-separated globs relative to hf_path; \"\": train_split's")      \
  X(std::string, train_split, train_split, "train", any(), maxtext(),                               \
    "hf: the split trained on")                                                                     \
  X(std::string, train_data_columns, train_data_columns, "text", any(), maxtext(),                  \
    "hf: the columns of a training row: one text column, messages (a conversation through the "   \
    "chat template), or prompt,completion; a YAML list or comma-separated")                        \
  X(std::string, chat_template_path, chat_template_path, "", any(), maxtext(),                      \
    "hf messages: a Jinja chat template file; \"\": the template of tokenizer_path's folder")      \
  X(std::string, chat_template, chat_template, "", any(), maxtext(),                                \
    "hf messages: the chat template's text, instead of chat_template_path")                        \
  X(TokenizerType, tokenizer_type, tokenizer_type, TokenizerType::Auto, any(), maxtext(),           \
    "auto (the kind tokenizer_path holds; byte when it is empty) | byte | sentencepiece | "         \
    "huggingface (the last two checked against the file); docs/DATA.md")                           \
  X(std::string, tokenizer_path, tokenizer_path, "", any(), maxtext(),                              \
    "a model folder (its tokenizer.json, else tokenizer.model), a tokenizer.json or a .model file") \
  X(bool, packing, packing, true, any(), maxtext(),                                                 \
    "pack documents into rows with segment ids (MaxText's default)")                               \
  X(PackingType, grain_packing_type, grain_packing_type, PackingType::FirstFit, any(), maxtext(),  \
    "first_fit (MaxText's grain default: the batch's rows open together, each piece into the "    \
    "first with room) | sequential (documents in order; a piece that does not fit starts the "     \
    "next row; with enable_data_shuffling=false); docs/DATA.md")                                    \
  X(bool, enable_data_shuffling, enable_data_shuffling, true, any(), maxtext(),                     \
    "first_fit: shuffle the documents as MaxText (default): grain's windows; hf: datasets' "      \
    "streaming shuffle, MaxText's HF pipeline")                                                     \
  X(int64_t, grain_shuffle_buffer_size, grain_shuffle_buffer_size, 100, closed(1, kI64), maxtext(), \
    "the shuffle window, in documents (MaxText's default); not dataset_type=hf's (1000 rows)")     \
  X(int64_t, hf_datasets_version, hf_datasets_version, 5, closed(4, 5), own(),                     \
    "dataset_type=hf shuffles as this major version of Hugging Face datasets does: 5 (what MaxText "\
    "0.2.5 installs today) or 4 (4.8.5 on, which it also accepts); docs/DATA.md")                  \
  X(bool, use_truncation, use_truncation, false, any(), maxtext(),                                  \
    "true: a document keeps its first max_target_length tokens, the rest is dropped (MaxText's "   \
    "default); false: cut into pieces")                                                             \
  X(int64_t, data_shuffle_seed, data_shuffle_seed, 0, closed(0, kI64), maxtext(),                   \
    "the seed of the data order")                                                                   \
  X(bool, sft_train_on_completion_only, sft_train_on_completion_only, false, any(), maxtext(),      \
    "count in the loss only the tokens a shard's loss mask marks (completions, assistant turns; "  \
    "`gemmax tokenize` writes the mask); false: every token counts")

// Several ranks (FSDP over MPI, docs/FSDP.md) and the seed's sharding switches.
#define GEMMAX_PARALLEL_KEYS(X)                                                                     \
  X(int64_t, ici_fsdp_parallelism, ici_fsdp_parallelism, -1, any(), maxtext(),                      \
    "ranks the parameters are sharded over; -1: the ranks the run was started with (mpirun -np "   \
    "N). With dry_run=true: plan one rank of N without starting N")                                 \
  X(bool, fsdp_replicate_small_params, fsdp_replicate_small_params, true, any(), own(),             \
    "norm scales, router.scale, per_expert_scale, layer_scalar replicated, their gradients "       \
    "all-reduced (seed #1); false: sharded and all-gathered with their layer")                      \
  X(FsdpEmbedding, fsdp_embedding, fsdp_embedding, FsdpEmbedding::Auto, any(), own(),               \
    "the vocabulary-sharded table (seed #3): vocab_parallel (lookup and head on each rank's "      \
    "vocabulary rows, the table never gathered) | gather (gathered for the lookup and the head) | " \
    "auto (whichever moves fewer bytes per step)")                                                  \
  X(VocabTilingAxis, vocab_tiling_axis, vocab_tiling_axis, VocabTilingAxis::Sequence, any(), own(), \
    "the output head's tiles (seed #5): sequence (each rank tiles its own rows' positions: nothing " \
    "moves) | batch (MaxText's previous axis: tiles of the global batch's rows, each spread over "  \
    "the ranks by an all-to-all of the head's input and of its gradient; num_vocab_tiling must "   \
    "divide the global batch)")                                                                     \
  X(int64_t, fsdp_prefetch_layers, fsdp_prefetch_layers, 1, closed(0, 1 << 16), own(),              \
    "layers gathered ahead: all-gathers in flight while a layer computes (and reduce-scatters in " \
    "flight in the backward); 0: no overlap")                                                       \
  X(double, comm_timeout_seconds, comm_timeout_seconds, 600.0, half_open(0, kInf), own(),           \
    "a collective waiting longer aborts every rank, naming the ranks it waits for; 0 waits "       \
    "forever")

#define GEMMAX_CHECKPOINT_KEYS(X)                                                                   \
  X(bool, enable_checkpointing, enable_checkpointing, true, any(), maxtext(),                       \
    "save train state to base_output_directory/run_name/checkpoints/")                             \
  X(int64_t, checkpoint_period, checkpoint_period, 100, closed(0, kI64), maxtext(),                 \
    "steps between checkpoints, and one at the end of the run; 0: only at the end")                \
  X(int64_t, max_num_checkpoints_to_keep, max_num_checkpoints_to_keep, 3, closed(0, kI64),          \
    maxtext_none_is("0"), "older checkpoints are deleted; 0 keeps all")

// Evaluation on held-out data. MaxText's defaults are -1 and -1 (none); gemmax's demo prints a
// held-out loss.
#define GEMMAX_EVAL_KEYS(X)                                                                         \
  X(int64_t, eval_interval, eval_interval, 500, either(-1, closed(1, kI64)), maxtext(),              \
    "evaluate after every N steps and at the end of the run; -1: never. Only where there is an "   \
    "eval set: eval_dataset_path, or the built-in corpus (shards without eval_dataset_path and "   \
    "synthetic data are not evaluated, and the log says so)")                                       \
  X(int64_t, eval_steps, eval_steps, 4, either(-1, closed(1, kI64)), maxtext(),                     \
    "batches per evaluation; -1: one pass over the whole eval set")                                 \
  X(int64_t, eval_per_device_batch_size, eval_per_device_batch_size, 0, any(), maxtext(),           \
    "rows per eval batch; 0: per_device_batch_size (at most that)")                                 \
  X(std::string, hf_eval_split, hf_eval_split, "", any(), maxtext(),                                \
    "hf: the split evaluated on; \"\" with no hf_eval_files: no evaluation")                        \
  X(std::string, hf_eval_files, hf_eval_files, "", any(), maxtext(),                                \
    "hf: the eval files, comma-separated globs relative to hf_path; \"\": hf_eval_split's")        \
  X(std::string, eval_data_columns, eval_data_columns, "text", any(), maxtext(),                    \
    "hf: the columns of an eval row (as train_data_columns)")                                       \
  X(std::string, eval_dataset_path, eval_dataset_path, "", any(), own(),                            \
    "shards held out for evaluation (a .bin shard, a folder, a comma-separated list); \"\" with "  \
    "dataset_type=builtin: the built-in corpus's held-out part")                                    \
  X(double, target_eval_loss, target_eval_loss, 0.0, half_open(0, kInf), maxtext(),                 \
    "stop the run, with a checkpoint, once eval/avg_loss <= this; 0: off (needs an evaluation: "   \
    "eval_interval > 0)")

// LoRA and QLoRA fine-tuning (docs/LORA.md): MaxText's lora: block of configs/post_train/sft.yml
// (read flat, lora.lora_rank=16 on the command line), and PEFT's LoraConfig fields.
#define GEMMAX_LORA_KEYS(X)                                                                         \
  X(bool, enable_lora, enable_lora, false, any(), maxtext(),                                        \
    "train low-rank adapters on a frozen base (load_parameters_path) instead of every weight")     \
  X(int64_t, lora_rank, lora_rank, 0, closed(0, kI32), maxtext(),                                   \
    "the adapters' rank r (PEFT's r); > 0 with enable_lora")                                        \
  X(double, lora_alpha, lora_alpha, 0.0, half_open(0, kInf), maxtext(),                            \
    "the adapters' product is scaled by lora_alpha / r (use_rslora: / sqrt(r)); > 0 with "         \
    "enable_lora")                                                                                  \
  X(std::string, lora_module_path, lora_module_path, "", any(), maxtext(),                          \
    "a regex searched in each matrix's MaxText path (decoder/layers_3/self_attention/query, "      \
    "docs/LORA.md); \"\": MaxText's gemma4 entry of lora_module_path.yml (attention and MLPs)")    \
  X(std::string, lora_target_modules, lora_target_modules, "", any(), own(),                        \
    "instead of lora_module_path: PEFT's target_modules, Hugging Face module names (q_proj, "      \
    "gate_proj, router's proj, ...) as a YAML list or comma-separated, or all-linear")             \
  X(std::string, lora_target_parameters, lora_target_parameters, "", any(), own(),                  \
    "with lora_target_modules: PEFT's target_parameters, the experts' 3-D weights "                \
    "(experts.gate_up_proj, experts.down_proj), one adapter per expert")                           \
  X(bool, use_rslora, use_rslora, false, any(), own(),                                              \
    "PEFT's rank-stabilised scale lora_alpha / sqrt(r)")                                            \
  X(double, lora_dropout, lora_dropout, 0.0, half_open(0, 1), own(),                                \
    "PEFT's dropout on an adapter's input (not on the experts', as PEFT)")                          \
  X(LoraWeightQtype, lora_weight_qtype, lora_weight_qtype, LoraWeightQtype::None, any(),            \
    maxtext_none_is("none"),                                                                        \
    "none (the frozen base in dtype) | nf4 (QLoRA: the frozen matrices as NF4 blocks, "             \
    "bitsandbytes' format, dequantised per layer)")                                                  \
  X(int64_t, lora_tile_size, lora_tile_size, 64, closed(2, 1 << 20), maxtext_none_is("64"),        \
    "QLoRA: elements per NF4 block, each with its own absmax (bitsandbytes' blocksize)")           \
  X(std::string, lora_restore_path, lora_restore_path, "", any(), maxtext(),                        \
    "start the adapters from a PEFT adapter folder (ignored when the run resumes)")                \
  X(std::string, hf_lora_adapter_path, hf_lora_adapter_path, "", any(), maxtext(),                  \
    "a PEFT adapter folder (adapter_config.json, adapter_model.safetensors): eval, sample and "    \
    "grad apply it; a training run starts from it as from lora_restore_path")

// Every part, in the order configs/base.yml lists them: P(part, Struct, KEYS).
#define GEMMAX_KEY_PARTS(P)                                   \
  P(run, RunConfig, GEMMAX_RUN_KEYS)                          \
  P(backend, BackendConfig, GEMMAX_BACKEND_KEYS)              \
  P(model, ModelConfig, GEMMAX_MODEL_KEYS)                    \
  P(data, DataConfig, GEMMAX_DATA_KEYS)                       \
  P(step, StepConfig, GEMMAX_STEP_KEYS)                       \
  P(optimizer, OptimizerConfig, GEMMAX_OPTIMIZER_KEYS)        \
  P(parallel, ParallelConfig, GEMMAX_PARALLEL_KEYS)           \
  P(checkpoint, CheckpointConfig, GEMMAX_CHECKPOINT_KEYS)     \
  P(eval, EvalConfig, GEMMAX_EVAL_KEYS)                       \
  P(lora, LoraConfig, GEMMAX_LORA_KEYS)

// A key's member, declared with its default.
#define GEMMAX_KEY_FIELD(Type, field, key, default_value, range, maxtext, help) \
  Type field = default_value;

// clang-format on

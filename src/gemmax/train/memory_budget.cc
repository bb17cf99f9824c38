#include "gemmax/train/memory_budget.h"

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "gemmax/base/strings.h"
#include "gemmax/train/lora_setup.h"

namespace gemmax {

MemoryPlanInput memory_plan_input(const TrainConfig& c, int ranks) {
  MemoryPlanInput in;
  in.model = c.model;
  const StepConfig& s = c.step;
  in.batch = s.per_device_batch_size;
  in.seq = s.max_target_length;
  if (in.batch <= 0) fail("per_device_batch_size must be positive, got ", in.batch);
  if (in.seq <= 0) fail("max_target_length must be positive, got ", in.seq);
  ModelOptions& o = in.options;
  o.act = s.dtype;
  in.weight = s.weight_dtype;
  const bool same = o.act == in.weight && (o.act == DType::F32 || o.act == DType::F64);
  const bool mixed = o.act == DType::BF16 && in.weight == DType::F32;
  if (!same && !mixed)
    fail("dtype=", dtype_name(o.act), " with weight_dtype=", dtype_name(in.weight),
         " is not supported: use dtype=bfloat16 weight_dtype=float32 (MaxText's default: bf16 "
         "compute, fp32 master weights), or dtype=float32 (or float64) with the same weight_dtype");
  o.remat = s.remat_policy;
#define GEMMAX_COPY_OPTION(Type, field, key, default_value, range, maxtext, help) o.field = s.field;
  GEMMAX_MODEL_OPTION_KEYS(GEMMAX_COPY_OPTION)
#undef GEMMAX_COPY_OPTION
  if (o.num_vocab_tiling <= 0 || in.seq % o.num_vocab_tiling != 0)
    fail("num_vocab_tiling=", o.num_vocab_tiling, " does not divide max_target_length=", in.seq,
         ": the output head tiles positions along the sequence; use a divisor of ", in.seq,
         " (1 turns tiling off)");
  if (s.attention == Attention::DotProduct && !s.float32_qk_product) {
    o.attention_bf16_scores = true;
    o.attention_bf16_softmax = !s.float32_logits;  // MaxText's softmax in bf16
    if (o.attention_bf16_softmax && c.backend.backend == BackendKind::Cuda)
      fail("attention=dot_product with float32_qk_product=false and float32_logits=false (MaxText's "
           "softmax in bf16) is built on the reference and cpu backends, not on backend=cuda: set "
           "float32_logits=true (bf16 scores, softmax in fp32) or float32_qk_product=true (fp32 "
           "scores), or attention=flash, or train with backend=cpu");
  }
  if (!o.moe_dlhs_in_place && !o.moe_fused_gate_up)
    fail("moe_dlhs_in_place=false (a transposed copy of the expert weights) needs "
         "moe_fused_gate_up=true: the copy is of the fused [E, 2F, D] weight");
  in.freeze = c.run.freeze;
  in.lora = lora_options(c);
  const int64_t fsdp = c.parallel.ici_fsdp_parallelism;
  if (fsdp == 0 || fsdp < -1)
    fail("ici_fsdp_parallelism=", fsdp,
         " must be a positive number of ranks, or -1 (the ranks the run was started with)");
  in.fsdp = fsdp == -1 ? ranks : fsdp;
  if (o.float32_gate_logits && o.act == DType::BF16 && in.fsdp > 1)
    fail("float32_gate_logits=true is not built under FSDP yet: the router reads its fp32 master "
         "matrix, which FSDP gathers in bf16 with the layer's other matrices; train on one rank, "
         "or set float32_gate_logits=false");
  in.fsdp_options = fsdp_options(c.parallel, o.num_vocab_tiling, in.model, in.fsdp, in.batch,
                                 in.seq, o.act, in.weight);
  if (in.lora && in.lora->qtype == LoraWeightQtype::Nf4 && in.fsdp > 1) {
    // QLoRA keeps the embedding table whole on every rank (parallel/fsdp_nf4.h): nothing to split.
    if (c.parallel.fsdp_embedding == FsdpEmbedding::VocabParallel || in.fsdp_options.tile_batch)
      fail("lora_weight_qtype=nf4 under FSDP keeps the embedding table whole on every rank, so "
           "the head runs on each rank's own tokens: fsdp_embedding=vocab_parallel and "
           "vocab_tiling_axis=batch do not apply; set fsdp_embedding=auto (or gather) and "
           "vocab_tiling_axis=sequence");
    in.fsdp_options.embedding = EmbeddingMode::Gather;
    in.fsdp_options.embedding_choice = "QLoRA: the table is whole on every rank, never moved";
  }
  return in;
}

MemoryPlanInput memory_plan_input(const Config& config, int ranks) {
  return memory_plan_input(train_config_from(config), ranks);
}

BackendOptions backend_options(const TrainConfig& c) {
  const BackendConfig& k = c.backend;
  BackendOptions b;
  b.name = name_of(k.backend);
  b.num_threads = int(k.num_threads);
  b.isa = name_of(k.cpu_kernels);
  b.cuda_kernels = k.cuda_kernels;
  b.cuda_gmm = k.cuda_gmm;
  b.cuda_attention = k.cuda_attention;
  b.cuda_sync_check = k.cuda_sync_check;
  return b;
}

void check_memory_limit(const TrainConfig& c, const MemoryPlan& plan) {
  const double limit_gb = c.run.max_memory_gb;
  if (limit_gb < 0) fail("max_memory_gb=", limit_gb, " must be >= 0 (0: no limit)");
  if (limit_gb == 0) return;
  const double limit = limit_gb * double(1ull << 30);
  if (double(plan.peak_total) <= limit) return;
  std::ostringstream os;
  os << "the memory plan needs " << format_bytes(double(plan.peak_total))
     << " per device, more than max_memory_gb=" << limit_gb
     << " GiB; nothing was run. Lower it with remat_policy=full, a larger "
        "num_vocab_tiling, a "
        "smaller per_device_batch_size or max_target_length (or more "
        "ici_fsdp_parallelism "
        "ranks), or raise max_memory_gb.\n"
     << format_memory_plan(plan);
  fail(os.str());
}

void check_fits_this_machine(const TrainConfig& c, const MemoryPlan& plan) {
  if (c.backend.backend == BackendKind::Cuda) return;  // device memory: the cuda allocator names the keys
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return;
  const double machine = double(pages) * double(page);
  if (double(plan.peak_total) <= machine) return;
  const StepConfig& s = c.step;
  fail("the memory plan needs ", format_bytes(double(plan.peak_total)),
       ", more than this machine's ", format_bytes(machine),
       " of memory; nothing was allocated. It is sized by model_name=", c.model.name,
       " (and the model keys), per_device_batch_size=", s.per_device_batch_size,
       ", max_target_length=", s.max_target_length, ", dtype=", dtype_name(s.dtype),
       ", remat_policy=", name_of(s.remat_policy), " and num_vocab_tiling=", s.num_vocab_tiling,
       ": lower them (dry_run=true prints the plan), or shard the model over more ranks\n",
       format_memory_plan(plan));
}

nlohmann::json memory_json(const MemoryPlan& plan, const MemoryTracker& measured) {
  nlohmann::json planned, meas;
  for (size_t k = 0; k < kNumMemKinds; ++k) {
    const std::string name(mem_kind_name(MemKind(k)));
    planned[name] = plan.peak[k];
    meas[name] = measured.peak(MemKind(k));
  }
  planned["total"] = plan.peak_total;
  meas["total"] = measured.peak_total();
  return {{"planned", planned}, {"measured", meas}};
}

}  // namespace gemmax

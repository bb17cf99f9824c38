#include "gemmax/train/memory_budget.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "gemmax/config/run_config.h"

namespace gemmax {

MemoryPlanInput memory_plan_input(const Config& c) {
  MemoryPlanInput in;
  in.model = model_config_from(c);
  in.batch = c.get_int("per_device_batch_size");
  in.seq = c.get_int("max_target_length");
  if (in.batch <= 0) fail("per_device_batch_size must be positive, got ", in.batch);
  if (in.seq <= 0) fail("max_target_length must be positive, got ", in.seq);
  in.act = parse_dtype(c.get_string("dtype"));
  in.weight = parse_dtype(c.get_string("weight_dtype"));
  const bool same = in.act == in.weight && (in.act == DType::F32 || in.act == DType::F64);
  const bool mixed = in.act == DType::BF16 && in.weight == DType::F32;
  if (!same && !mixed)
    fail("dtype=", dtype_name(in.act), " with weight_dtype=", dtype_name(in.weight),
         " is not supported: use dtype=bfloat16 weight_dtype=float32 (MaxText's default: bf16 "
         "compute, fp32 master weights), or dtype=float32 (or float64) with the same "
         "weight_dtype");
  in.remat = parse_remat_policy(c.get_string("remat_policy"));
  in.num_vocab_tiling = c.get_int("num_vocab_tiling");
  if (in.num_vocab_tiling <= 0 || in.seq % in.num_vocab_tiling != 0)
    fail("num_vocab_tiling=", in.num_vocab_tiling, " does not divide max_target_length=", in.seq,
         ": the output head tiles positions along the sequence; use a divisor of ", in.seq,
         " (1 turns tiling off)");
  in.freeze = c.get_string("freeze");
  in.fsdp = c.get_int("ici_fsdp_parallelism");
  if (in.fsdp <= 0)
    fail("ici_fsdp_parallelism=", in.fsdp,
         " must be a positive number of devices (1: a single device)");
  return in;
}

void check_memory_limit(const Config& c, const MemoryPlan& plan) {
  const double limit_gb = c.get_double("max_memory_gb");
  if (limit_gb < 0) fail("max_memory_gb=", limit_gb, " must be >= 0 (0: no limit)");
  if (limit_gb == 0) return;
  const double limit = limit_gb * double(1ull << 30);
  if (double(plan.peak_total) <= limit) return;
  std::ostringstream os;
  os << "the memory plan needs " << format_bytes(double(plan.peak_total))
     << " per device, more than max_memory_gb=" << limit_gb
     << " GiB; nothing was run. Lower it with remat_policy=full, a larger num_vocab_tiling, a "
        "smaller per_device_batch_size or max_target_length (or more ici_fsdp_parallelism "
        "devices), or raise max_memory_gb.\n"
     << format_memory_plan(plan);
  fail(os.str());
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

// From a run's config to its memory plan, and the refusal of a run that cannot fit.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "gemmax/backend/backend.h"
#include "gemmax/backend/backend_options.h"
#include "gemmax/config/config.h"
#include "gemmax/config/train_config.h"
#include "gemmax/train/memory_plan.h"

namespace gemmax {

// Checks the keys the plan depends on (model, per_device_batch_size, max_target_length, dtype,
// weight_dtype, remat_policy, num_vocab_tiling, ici_fsdp_parallelism and the fsdp_* switches).
// `ranks`: the ranks the run was started with, which ici_fsdp_parallelism=-1 means. Errors name
// the key, the value and the fix.
MemoryPlanInput memory_plan_input(const TrainConfig& config, int ranks = 1);
// The same from a Config, read by train_config_from.
MemoryPlanInput memory_plan_input(const Config& config, int ranks = 1);

// The backend the config names (backend, num_threads, cpu_kernels, cuda_kernels,
// cuda_sync_check), checked.
BackendOptions backend_options(const TrainConfig& config);

// Throws gemmax::Error, with the plan printed, when the planned peak exceeds max_memory_gb
// (GiB; 0 means no limit).
void check_memory_limit(const TrainConfig& config, const MemoryPlan& plan);

// Throws gemmax::Error when a host backend's (cpu, reference, cuda_emulated) plan exceeds this
// machine's physical memory, naming the keys that size it: such a run would die allocating.
void check_fits_this_machine(const TrainConfig& config, const MemoryPlan& plan);

// {"planned": {category: bytes, ..., "total": bytes}, "measured": {...}} (bytes; measured:
// the tracker's peaks), written by the trainer as run_dir/memory.json.
nlohmann::json memory_json(const MemoryPlan& plan, const MemoryTracker& measured);

}  // namespace gemmax

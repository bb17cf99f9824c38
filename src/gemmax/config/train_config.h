// A training run's configuration, typed: the key/value Config (config.h) read once into one
// struct per part of the run, so that the code reads fields, not key strings.
//
// Each part's fields are declared by its list in keys.h, which gives each key's type, default,
// range and help; train_config_from() reads every key into its field. Checks that need more
// than one part (the memory plan's, the sharding's, the evaluation's) stay with the code that
// combines them, with messages that name the keys.
#pragma once

#include <cstdint>
#include <string>

#include "gemmax/backend/backend_options.h"
#include "gemmax/base/dtype.h"
#include "gemmax/config/choices.h"
#include "gemmax/config/config.h"
#include "gemmax/config/keys.h"
#include "gemmax/config/model_config.h"

namespace gemmax {

struct StepConfig {
  GEMMAX_STEP_KEYS(GEMMAX_KEY_FIELD)
};
struct RunConfig {
  GEMMAX_RUN_KEYS(GEMMAX_KEY_FIELD)
};
struct OptimizerConfig {
  GEMMAX_OPTIMIZER_KEYS(GEMMAX_KEY_FIELD)
};
struct DataConfig {
  GEMMAX_DATA_KEYS(GEMMAX_KEY_FIELD)
};
struct ParallelConfig {
  GEMMAX_PARALLEL_KEYS(GEMMAX_KEY_FIELD)
};
struct CheckpointConfig {
  GEMMAX_CHECKPOINT_KEYS(GEMMAX_KEY_FIELD)
};
struct EvalConfig {
  GEMMAX_EVAL_KEYS(GEMMAX_KEY_FIELD)
};
struct LoraConfig {
  GEMMAX_LORA_KEYS(GEMMAX_KEY_FIELD)
};
// backend_options (train/memory_budget.h) turns it into the BackendOptions a backend is made with.
struct BackendConfig {
  GEMMAX_BACKEND_KEYS(GEMMAX_KEY_FIELD)
};

struct TrainConfig {
#define GEMMAX_PART_MEMBER(part, Struct, KEYS) Struct part;
  GEMMAX_KEY_PARTS(GEMMAX_PART_MEMBER)
#undef GEMMAX_PART_MEMBER
};

// Validates `config` (validate_run_config, the model's sizes) and reads it. Throws gemmax::Error
// for the first bad value, naming the key.
TrainConfig train_config_from(const Config& config);

}  // namespace gemmax

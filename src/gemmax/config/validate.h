// The one check of a run's hyperparameters and sizes, before anything is allocated.
//
// Every numeric key has a range; a value outside it (or any non-finite number) is an error
// naming the key, the value and the range. Sizes derived from the keys (tokens per step, the
// largest tensors, parameter counts, bytes) are computed with overflow-checked arithmetic
// (base/checked.h): a size that 64 bits cannot hold, or that the int32 index tensors cannot
// address, is an error naming the keys that produced it.
#pragma once

#include "gemmax/config/config.h"

namespace gemmax {

// Throws gemmax::Error for the first bad value.
void validate_run_config(const Config& config);

}  // namespace gemmax

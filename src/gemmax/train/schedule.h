// Learning-rate schedule: linear warmup, then cosine decay to a final fraction
// (docs/TRAINING.md §12).
#pragma once

#include <cstdint>

namespace gemmax {

struct LrSchedule {
  double peak = 3e-5;            // learning_rate
  int64_t total_steps = 0;       // learning_rate_schedule_steps (Ns)
  double warmup_fraction = 0.1;  // warmup_steps_fraction: Nw = int(fraction * Ns)
  double final_fraction = 0.1;   // cosine_learning_rate_final_fraction

  // The rate used by the update of step `step` (0-based). Step 0 of the warmup uses 0.
  double at(int64_t step) const;
};

}  // namespace gemmax

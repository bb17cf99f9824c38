#include "gemmax/train/schedule.h"

#include <cmath>

namespace gemmax {

double LrSchedule::at(int64_t step) const {
  const int64_t warmup = int64_t(warmup_fraction * double(total_steps));
  if (step < warmup) return peak * double(step) / double(warmup);
  if (step >= total_steps) return 0.0;
  const double final_lr = final_fraction * peak;
  const int64_t n = total_steps - warmup;
  // Cosine over n - 1 intervals, so the last step of the schedule lands on the final rate.
  const double a = n > 1 ? 0.5 * (1.0 + std::cos(M_PI * double(step - warmup) / double(n - 1))) : 1.0;
  return peak * a + final_lr * (1.0 - a);
}

}  // namespace gemmax

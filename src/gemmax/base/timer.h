// Wall-clock timing.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>

namespace gemmax {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void reset() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

// The best rate (work per second) of f over `reps` runs of at least 0.1 s, after an untimed run.
inline double best_rate(double work, const std::function<void()>& f, int reps = 3) {
  f();
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    int n = 0;
    do {
      f();
      ++n;
    } while (t.seconds() < 0.1);
    best = std::max(best, work * n / t.seconds());
  }
  return best;
}

}  // namespace gemmax

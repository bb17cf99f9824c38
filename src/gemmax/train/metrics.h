// Per-step metrics: the console line and metrics.jsonl, MaxText's names where it has them.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace gemmax {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;           // learning/loss: lm_loss + lb_loss
  double lm_loss = 0;        // masked mean cross-entropy
  double lb_loss = 0;        // moe_lb_loss
  double grad_norm = 0;      // after clipping
  double raw_grad_norm = 0;
  double learning_rate = 0;  // current_learning_rate
  double step_seconds = 0;
  double tokens_per_sec = 0;   // per device, padded tokens included
  double tflops_per_sec = 0;   // per device, MaxText's count
  double mfu = 0;              // tflops_per_sec / peak_tflops_per_device (0: unknown)
  int64_t total_weights = 0;   // real target tokens
  int64_t skipped_steps = 0;   // steps this invocation skipped so far (non-finite values)
};

std::string format_step_line(const StepMetrics& m);

// Appends one JSON object per step to a file.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  void write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace gemmax

// Per-step metrics: the console line and metrics.jsonl, MaxText's names where it has them.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace gemmax {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;       // learning/loss: lm_loss + lb_loss
  double lm_loss = 0;    // masked mean cross-entropy
  double lb_loss = 0;    // moe_lb_loss
  double grad_norm = 0;  // after clipping
  double raw_grad_norm = 0;
  double learning_rate = 0;  // current_learning_rate
  double step_seconds = 0;
  double tokens_per_sec = 0;  // per device, padded tokens included
  double tflops_per_sec = 0;  // per device, MaxText's count
  double mfu = 0;             // tflops_per_sec / peak_tflops_per_device (0: unknown)
  int64_t total_weights = 0;  // real target tokens
  // FSDP: what this rank's collectives moved in the step (payload bytes, dist/comm.h) and the
  // seconds it waited on them.
  bool has_comm = false;
  int64_t comm_all_gather_bytes = 0, comm_reduce_scatter_bytes = 0, comm_all_reduce_bytes = 0;
  double comm_wait_seconds = 0;
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

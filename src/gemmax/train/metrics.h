// Per-step metrics, where users read them: the console line, metrics.jsonl and TensorBoard
// event files, all under MaxText's names where it has them.
#pragma once

#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "gemmax/config/train_config.h"

namespace gemmax {

class EventFileWriter;

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
  int64_t skipped_steps = 0;  // steps this invocation skipped so far (non-finite values)
  // FSDP: what this rank's collectives moved in the step (payload bytes, parallel/comm.h) and the
  // seconds it waited on them.
  bool has_comm = false;
  int64_t comm_all_gather_bytes = 0, comm_reduce_scatter_bytes = 0, comm_all_reduce_bytes = 0;
  int64_t comm_all_to_all_bytes = 0;  // sent to the other ranks (vocab_tiling_axis=batch)
  double comm_wait_seconds = 0;
  // An evaluation after this step (train/eval.h): MaxText's eval/* figures.
  bool has_eval = false;
  double eval_avg_loss = 0, eval_total_loss = 0, eval_moe_lb_loss = 0;
  int64_t eval_total_weights = 0, eval_batches = 0;
};

std::string format_step_line(const StepMetrics& m);

// A step's values under their names ("learning/loss"), in a fixed order: the one list that
// metrics.jsonl and the TensorBoard events are both written from.
struct MetricValue {
  std::string name;
  double value = 0;
  bool integer = false;  // written to JSON as an integer
};
std::vector<MetricValue> metric_values(const StepMetrics& m);

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

// Where a run's metrics go, from its config.
struct MetricsOptions {
  std::string jsonl_path;       // run_dir/metrics.jsonl
  std::string tensorboard_dir;  // tensorboard_dir, else run_dir/tensorboard; "": disabled
  std::string tensorboard_owner;  // names this run's event files there (io/tfevents.h)
  int64_t log_period = 1;       // console line every log_period steps (and the last)
};
MetricsOptions metrics_options(const RunConfig& config, const std::string& run_dir);

// Keeps only the metrics of steps before `step` (metrics.jsonl and the event files), for a run
// that is about to run from `step`: from its checkpoint on resume, from 0 on a fresh start.
void drop_metrics_from(const MetricsOptions& options, int64_t step);

// Takes each step's metrics and writes them everywhere: a TensorBoard event (a new file per
// invocation), a line of metrics.jsonl, and every log_period steps a console line, in that
// order, each written through to the OS, so that a killed run keeps every step it printed.
class MetricsSink {
 public:
  MetricsSink(const MetricsOptions& options, std::ostream& log);
  ~MetricsSink();

  void write(const StepMetrics& m, bool last_step);
  // "metrics in out/run/metrics.jsonl, TensorBoard events in out/run/tensorboard"
  std::string describe() const;

 private:
  MetricsOptions options_;
  std::ostream& log_;
  MetricsWriter jsonl_;
  std::unique_ptr<EventFileWriter> events_;
};

}  // namespace gemmax

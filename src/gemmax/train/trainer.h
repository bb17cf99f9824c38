// The training loop: data -> forward/backward -> clip -> AdamW, with per-step metrics.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>

#include "gemmax/backend/backend.h"
#include "gemmax/config/config.h"
#include "gemmax/data/loader.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/memory_plan.h"
#include "gemmax/train/optimizer.h"
#include "gemmax/train/schedule.h"

namespace gemmax {

struct TrainSummary {
  int64_t steps = 0;
  double first_loss = 0, last_loss = 0;
  double mean_step_seconds = 0;  // over the steps after the first
  double tokens_per_sec = 0, tflops_per_sec = 0;
};

class Trainer {
 public:
  // Builds everything the config names; throws gemmax::Error for bad input before any step.
  explicit Trainer(const Config& config);
  ~Trainer();

  TrainSummary run(std::ostream& log);

  const Gemma4Model& model() const { return *model_; }
  const Tensor& weights() const { return weights_; }
  const std::string& run_dir() const { return run_dir_; }
  const MemoryPlan& memory_plan() const { return plan_; }

 private:
  void print_header(std::ostream& log) const;

  Config config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Gemma4Model> model_;
  std::unique_ptr<DataLoader> data_;
  std::unique_ptr<AdamW> optimizer_;
  LrSchedule schedule_;
  MemoryPlan plan_;
  Tensor weights_, grads_;
  int64_t steps_ = 0, batch_ = 0, seq_ = 0;
  std::string run_dir_;
};

}  // namespace gemmax

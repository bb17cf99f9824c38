#include "gemmax/train/metrics.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "gemmax/base/error.h"

namespace gemmax {

std::string format_step_line(const StepMetrics& m) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "step %5lld | loss %.4f | lm_loss %.4f | lb_loss %.5f | grad_norm %.3f | "
                "lr %.3e | %.3f s | %.0f tokens/s | %.4f TFLOP/s%s",
                (long long)m.step, m.loss, m.lm_loss, m.lb_loss, m.grad_norm, m.learning_rate,
                m.step_seconds, m.tokens_per_sec, m.tflops_per_sec,
                m.mfu > 0 ? (" | MFU " + std::to_string(100 * m.mfu).substr(0, 5) + "%").c_str()
                          : "");
  return buf;
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), out_(path, std::ios::app) {
  if (!out_) fail("cannot open '", path, "' for writing metrics (check the directory exists and is writable)");
}

void MetricsWriter::write(const StepMetrics& m) {
  nlohmann::json j;
  j["step"] = m.step;
  j["learning/loss"] = m.loss;
  j["learning/lm_loss"] = m.lm_loss;
  j["learning/moe_lb_loss"] = m.lb_loss;
  j["learning/perplexity"] = std::exp(m.lm_loss);
  j["learning/grad_norm"] = m.grad_norm;
  j["learning/raw_grad_norm"] = m.raw_grad_norm;
  j["learning/current_learning_rate"] = m.learning_rate;
  j["learning/total_weights"] = m.total_weights;
  if (m.skipped_steps > 0) j["learning/skipped_steps"] = m.skipped_steps;
  j["perf/step_time_seconds"] = m.step_seconds;
  j["perf/per_device_tokens_per_sec"] = m.tokens_per_sec;
  j["perf/per_device_tflops_per_sec"] = m.tflops_per_sec;
  if (m.mfu > 0) j["perf/mfu"] = m.mfu;
  out_ << j.dump() << "\n";
  out_.flush();
  if (!out_) fail("writing '", path_, "' failed (disk full?)");
}

}  // namespace gemmax

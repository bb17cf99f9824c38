#include "gemmax/train/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "gemmax/base/crc32c.h"
#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"
#include "gemmax/io/atomic_file.h"
#include "gemmax/io/tfevents.h"

namespace gemmax {
namespace fs = std::filesystem;

std::string format_step_line(const StepMetrics& m) {
  char buf[640];
  std::snprintf(
      buf, sizeof buf,
      "step %5lld | loss %.4f | lm_loss %.4f | lb_loss %.5f | grad_norm %.3f | "
      "lr %.3e | %.3f s | %.0f tokens/s | %.4f TFLOP/s%s",
      (long long)m.step, m.loss, m.lm_loss, m.lb_loss, m.grad_norm, m.learning_rate, m.step_seconds,
      m.tokens_per_sec, m.tflops_per_sec,
      m.mfu > 0 ? (" | MFU " + std::to_string(100 * m.mfu).substr(0, 5) + "%").c_str() : "");
  std::string line = buf;
  if (m.has_comm) {
    std::snprintf(buf, sizeof buf, " | comm AG %s RS %s AR %s",
                  format_bytes(double(m.comm_all_gather_bytes)).c_str(),
                  format_bytes(double(m.comm_reduce_scatter_bytes)).c_str(),
                  format_bytes(double(m.comm_all_reduce_bytes)).c_str());
    line += buf;
    if (m.comm_all_to_all_bytes > 0)
      line += " A2A " + format_bytes(double(m.comm_all_to_all_bytes));
    std::snprintf(buf, sizeof buf, ", waited %.3f s", m.comm_wait_seconds);
    line += buf;
  }
  if (m.has_eval) {
    std::snprintf(buf, sizeof buf, " | eval_loss %.4f (perplexity %.3f, %lld targets in %lld batches)",
                  m.eval_avg_loss, std::exp(m.eval_avg_loss), (long long)m.eval_total_weights,
                  (long long)m.eval_batches);
    line += buf;
  }
  return line;
}

std::vector<MetricValue> metric_values(const StepMetrics& m) {
  std::vector<MetricValue> v = {
      {"learning/loss", m.loss},
      {"learning/lm_loss", m.lm_loss},
      {"learning/moe_lb_loss", m.lb_loss},
      {"learning/perplexity", std::exp(m.lm_loss)},
      {"learning/grad_norm", m.grad_norm},
      {"learning/raw_grad_norm", m.raw_grad_norm},
      {"learning/current_learning_rate", m.learning_rate},
      {"learning/total_weights", double(m.total_weights), true},
      {"perf/step_time_seconds", m.step_seconds},
      {"perf/per_device_tokens_per_sec", m.tokens_per_sec},
      {"perf/per_device_tflops_per_sec", m.tflops_per_sec},
  };
  if (m.mfu > 0) v.push_back({"perf/mfu", m.mfu});
  if (m.skipped_steps > 0) v.push_back({"learning/skipped_steps", double(m.skipped_steps), true});
  if (m.has_comm) {
    v.push_back({"perf/comm_all_gather_bytes", double(m.comm_all_gather_bytes), true});
    v.push_back({"perf/comm_reduce_scatter_bytes", double(m.comm_reduce_scatter_bytes), true});
    v.push_back({"perf/comm_all_reduce_bytes", double(m.comm_all_reduce_bytes), true});
    v.push_back({"perf/comm_all_to_all_bytes", double(m.comm_all_to_all_bytes), true});
    v.push_back({"perf/comm_wait_seconds", m.comm_wait_seconds});
  }
  if (m.has_eval) {
    v.push_back({"eval/avg_loss", m.eval_avg_loss});
    v.push_back({"eval/avg_perplexity", std::exp(m.eval_avg_loss)});
    v.push_back({"eval/total_loss", m.eval_total_loss});
    v.push_back({"eval/total_weights", double(m.eval_total_weights), true});
    v.push_back({"eval/moe_lb_loss", m.eval_moe_lb_loss});
    v.push_back({"eval/avg_moe_lb_loss",
                 m.eval_batches > 0 ? m.eval_moe_lb_loss / double(m.eval_batches) : 0.0});
  }
  return v;
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), out_(path, std::ios::app) {
  if (!out_)
    fail("cannot open '", path,
         "' for writing metrics (check the directory exists and is writable)");
}

void MetricsWriter::write(const StepMetrics& m) {
  nlohmann::json j;
  j["step"] = m.step;
  for (const MetricValue& v : metric_values(m)) {
    if (v.integer)
      j[v.name] = int64_t(v.value);
    else
      j[v.name] = v.value;
  }
  out_ << j.dump() << "\n";
  out_.flush();
  if (!out_) fail("writing '", path_, "' failed (disk full?)");
}

MetricsOptions metrics_options(const RunConfig& config, const std::string& run_dir) {
  MetricsOptions o;
  o.jsonl_path = (fs::path(run_dir) / "metrics.jsonl").string();
  if (config.enable_tensorboard) {
    o.tensorboard_dir = config.tensorboard_dir;
    if (o.tensorboard_dir.empty()) o.tensorboard_dir = (fs::path(run_dir) / "tensorboard").string();
    // The run folder (locked by its one run) owns the files: its absolute path, hashed.
    const std::string id = fs::weakly_canonical(fs::absolute(run_dir)).string();
    char owner[32];
    std::snprintf(owner, sizeof owner, "run%08x", crc32c(id));
    o.tensorboard_owner = owner;
  }
  o.log_period = std::max<int64_t>(1, config.log_period);
  return o;
}

void drop_metrics_from(const MetricsOptions& o, int64_t step) {
  std::string kept;
  if (step > 0) {
    std::ifstream in(o.jsonl_path);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("step", int64_t(-1)) < step) kept += line + "\n";
    }
  }
  write_file_atomic(o.jsonl_path, kept);
  if (o.tensorboard_dir.empty()) return;
  try {
    drop_events_from(o.tensorboard_dir, step, o.tensorboard_owner);
  } catch (const Error& e) {
    fail(e.what(), "; move the file out of '", o.tensorboard_dir,
         "', or set enable_tensorboard=false to leave the event files alone");
  }
}

MetricsSink::MetricsSink(const MetricsOptions& options, std::ostream& log)
    : options_(options), log_(log), jsonl_(options.jsonl_path) {
  if (!options_.tensorboard_dir.empty())
    events_ = std::make_unique<EventFileWriter>(options_.tensorboard_dir, options_.tensorboard_owner);
}

MetricsSink::~MetricsSink() = default;

void MetricsSink::write(const StepMetrics& m, bool last_step) {
  if (events_) {
    std::vector<NamedScalar> scalars;
    for (const MetricValue& v : metric_values(m)) scalars.emplace_back(v.name, v.value);
    events_->write_scalars(m.step, scalars);
  }
  jsonl_.write(m);
  if (m.step % options_.log_period == 0 || last_step || m.has_eval) log_ << format_step_line(m) << std::endl;
}

std::string MetricsSink::describe() const {
  std::string s = "metrics in " + jsonl_.path();
  if (events_) s += ", TensorBoard events in " + options_.tensorboard_dir;
  return s;
}

}  // namespace gemmax

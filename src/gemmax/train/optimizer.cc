#include "gemmax/train/optimizer.h"

#include <cmath>
#include <limits>

namespace gemmax {
namespace {

struct NonfiniteInjection {
  std::string name;
  int64_t first_t = 0, count = 0;
} g_injection;

}  // namespace

void inject_nonfinite_gradient_for_testing(const std::string& name, int64_t first_t,
                                           int64_t count) {
  g_injection = {name, first_t, count};
}

AdamWConfig AdamWConfig::from(const Config& c) {
  if (c.get_string("opt_type") != "adamw")
    fail("opt_type '", c.get_string("opt_type"), "' is not supported: use adamw");
  AdamWConfig a;
  a.b1 = c.get_double("adam_b1");
  a.b2 = c.get_double("adam_b2");
  a.eps = c.get_double("adam_eps");
  a.eps_root = c.get_double("adam_eps_root");
  a.weight_decay = c.get_double("adam_weight_decay");
  a.clip_norm = c.get_double("gradient_clipping_threshold");
  return a;
}

AdamW::AdamW(Backend& be, const ParamTable& table, const std::vector<bool>& trainable, DType dtype,
             const AdamWConfig& config)
    : be_(be), table_(table), trainable_(trainable), cfg_(config) {
  GEMMAX_CHECK(trainable.size() == table.specs().size(), "one trainable flag per parameter");
  int64_t state = 0;
  for (size_t i = 0; i < trainable.size(); ++i) {
    if (!trainable[i]) continue;
    const ParamSpec& s = table.specs()[i];
    if (!segments_.empty() && segments_.back().begin + segments_.back().count == s.offset)
      segments_.back().count += s.numel();
    else
      segments_.push_back({s.offset, s.numel(), state});
    state += s.numel();
  }
  m_ = be.zeros({state}, dtype, MemKind::OptState);
  v_ = be.zeros({state}, dtype, MemKind::OptState);
}

void AdamW::step(const Tensor& weights, const Tensor& grads, const Tensor& scalars, double lr,
                 int64_t t) {
  if (!g_injection.name.empty() && t >= g_injection.first_t &&
      t < g_injection.first_t + g_injection.count)
    be_.fill(grads.flat_slice(table_.at(g_injection.name).offset, {1}),
             std::numeric_limits<double>::quiet_NaN());
  const Tensor sum_sq = scalars.flat_slice(StepScalars::kGradSumSq, {1});
  be_.fill(sum_sq, 0.0);
  for (const Segment& s : segments_) be_.sum_squares(sum_sq, grads.flat_slice(s.begin, {s.count}));
  const AdamWStep step{
      lr, cfg_.b1, cfg_.b2, cfg_.eps, cfg_.eps_root, cfg_.weight_decay, cfg_.clip_norm, t};
  for (const Segment& s : segments_)
    be_.adamw_step(weights.flat_slice(s.begin, {s.count}), grads.flat_slice(s.begin, {s.count}),
                   m_.flat_slice(s.state_begin, {s.count}), v_.flat_slice(s.state_begin, {s.count}),
                   step, scalars);
}

std::string AdamW::first_nonfinite_gradient(const Tensor& grads) const {
  for (size_t i = 0; i < trainable_.size(); ++i) {
    if (!trainable_[i]) continue;
    const ParamSpec& s = table_.specs()[i];
    const Tensor g = be_.to_host(grads.flat_slice(s.offset, s.shape));
    for (int64_t j = 0; j < g.numel(); ++j)
      if (const double v = get_as_double(g, j); !std::isfinite(v))
        return str_cat(s.name, " (element ", j, ": ", v, ")");
  }
  return "";
}

NamedTensors AdamW::named_state() const {
  NamedTensors out;
  int64_t at = 0;
  for (size_t i = 0; i < trainable_.size(); ++i) {
    if (!trainable_[i]) continue;
    const ParamSpec& s = table_.specs()[i];
    out.emplace_back("mu." + s.name, m_.flat_slice(at, s.shape));
    out.emplace_back("nu." + s.name, v_.flat_slice(at, s.shape));
    at += s.numel();
  }
  return out;
}

}  // namespace gemmax

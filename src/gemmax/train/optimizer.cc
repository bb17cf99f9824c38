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

AdamW::AdamW(Backend& be, const ParamTable& table, const ShardLayout& layout,
             const std::vector<bool>& trainable, DType dtype, const AdamWConfig& config)
    : be_(be), table_(table), layout_(layout), trainable_(trainable), cfg_(config) {
  GEMMAX_CHECK(trainable.size() == table.specs().size(), "one trainable flag per parameter");
  int64_t state = 0;
  state_offset_.assign(trainable.size(), -1);
  for (size_t i = 0; i < trainable.size(); ++i) {
    const ParamPiece& p = layout.pieces[i];
    if (!trainable[i] || p.count == 0) continue;
    state_offset_[i] = state;
    Segment* last = segments_.empty() ? nullptr : &segments_.back();
    if (last && last->begin + last->count == p.local && last->replicated == p.replicated)
      last->count += p.count;
    else
      segments_.push_back({p.local, p.count, state, p.replicated});
    state += p.count;
  }
  // Under FSDP every rank allocates the most any rank needs (the last rank's pieces end in
  // padding).
  const int64_t size = layout.sharded() ? layout.max_trained(table, trainable) : state;
  m_ = be.zeros({size}, dtype, MemKind::OptState);
  v_ = be.zeros({size}, dtype, MemKind::OptState);
}

void AdamW::sum_squares(const Tensor& grads, const Tensor& sum, bool replicated) const {
  for (const Segment& s : segments_)
    if (s.replicated == replicated)
      be_.sum_squares({.sum = sum, .x = grads.flat_slice(s.begin, {s.count})});
}

void AdamW::inject_nonfinite_for_testing(const Tensor& grads, int64_t t, bool replicated) const {
  if (g_injection.name.empty() || t < g_injection.first_t ||
      t >= g_injection.first_t + g_injection.count)
    return;
  // The piece holding the parameter's first element, if it is on this rank.
  const ParamPiece& p =
      layout_.pieces[size_t(&table_.at(g_injection.name) - table_.specs().data())];
  if (p.count > 0 && p.begin == 0 && p.replicated == replicated)
    be_.fill(
        {.x = grads.flat_slice(p.local, {1}), .value = std::numeric_limits<double>::quiet_NaN()});
}

void AdamW::apply(const Tensor& weights, const Tensor& grads, const Tensor& scalars, double lr,
                  int64_t t) const {
  const AdamWStep step{
      lr, cfg_.b1, cfg_.b2, cfg_.eps, cfg_.eps_root, cfg_.weight_decay, cfg_.clip_norm, t};
  for (const Segment& s : segments_)
    be_.adamw_step({.param = weights.flat_slice(s.begin, {s.count}),
                    .grad = grads.flat_slice(s.begin, {s.count}),
                    .m = m_.flat_slice(s.state_begin, {s.count}),
                    .v = v_.flat_slice(s.state_begin, {s.count}),
                    .step = step,
                    .scalars = scalars});
}

void AdamW::step(const Tensor& weights, const Tensor& grads, const Tensor& scalars, double lr,
                 int64_t t) {
  inject_nonfinite_for_testing(grads, t, false);
  inject_nonfinite_for_testing(grads, t, true);
  const Tensor sum_sq = scalars.flat_slice(StepScalars::kGradSumSq, {1});
  be_.fill({.x = sum_sq, .value = 0.0});
  for (const Segment& s : segments_)
    be_.sum_squares({.sum = sum_sq, .x = grads.flat_slice(s.begin, {s.count})});
  apply(weights, grads, scalars, lr, t);
}

std::pair<Tensor, Tensor> AdamW::moments_of(size_t spec) const {
  if (state_offset_[spec] < 0) return {};
  const Shape shape{layout_.pieces[spec].count};
  return {m_.flat_slice(state_offset_[spec], shape), v_.flat_slice(state_offset_[spec], shape)};
}

NonfiniteGradient AdamW::first_nonfinite_gradient(const Tensor& grads) const {
  for (size_t i = 0; i < trainable_.size(); ++i) {
    const ParamPiece& p = layout_.pieces[i];
    if (!trainable_[i] || p.count == 0) continue;
    const Tensor g = be_.to_host(grads.flat_slice(p.local, {p.count}));
    for (int64_t j = 0; j < g.numel(); ++j)
      if (const double v = get_as_double(g, j); !std::isfinite(v))
        return {int64_t(i), p.begin + j, v};
  }
  return {};
}

NamedTensors AdamW::named_state() const {
  NamedTensors out;
  int64_t at = 0;
  for (size_t i = 0; i < trainable_.size(); ++i) {
    const ParamPiece& p = layout_.pieces[i];
    if (!trainable_[i] || p.count == 0) continue;
    const ParamSpec& s = table_.specs()[i];
    const Shape shape = p.count == s.numel() ? s.shape : Shape{p.count};
    out.emplace_back("mu." + s.name, m_.flat_slice(at, shape));
    out.emplace_back("nu." + s.name, v_.flat_slice(at, shape));
    at += p.count;
  }
  return out;
}

}  // namespace gemmax

#include "gemmax/train/optimizer.h"

#include <cmath>

namespace gemmax {

AdamWConfig AdamWConfig::from(const OptimizerConfig& c) {
  AdamWConfig a;
  a.b1 = c.adam_b1;
  a.b2 = c.adam_b2;
  a.eps = c.adam_eps;
  a.eps_root = c.adam_eps_root;
  a.weight_decay = c.adam_weight_decay;
  a.clip_norm = c.gradient_clipping_threshold;
  a.maxtext_embedding_table = c.embedding_table == EmbeddingTable::MaxText;
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
    const double units =
        cfg_.maxtext_embedding_table && table.specs()[i].name == "embed_tokens.weight"
            ? std::sqrt(double(table.config().d_model))
            : 1.0;
    Segment* last = segments_.empty() ? nullptr : &segments_.back();
    if (last && last->begin + last->count == p.local && last->replicated == p.replicated &&
        last->units == units)
      last->count += p.count;
    else
      segments_.push_back({p.local, p.count, state, p.replicated, units});
    state += p.count;
  }
  // Under FSDP every rank allocates the most any rank needs (the last rank's pieces end in
  // padding).
  const int64_t size = layout.sharded() ? layout.max_trained(table, trainable) : state;
  m_ = be.zeros({size}, dtype, MemKind::OptState);
  v_ = be.zeros({size}, dtype, MemKind::OptState);
}

void AdamW::add_squares(const Segment& s, const Tensor& grads, const Tensor& sum) const {
  const Tensor g = grads.flat_slice(s.begin, {s.count});
  if (s.units != 1.0) be_.scale({.x = g, .alpha = 1.0 / s.units});
  be_.sum_squares({.sum = sum, .x = g});
}

void AdamW::sum_squares(const Tensor& grads, const Tensor& sum, bool replicated) const {
  for (const Segment& s : segments_)
    if (s.replicated == replicated) add_squares(s, grads, sum);
}

void AdamW::apply(const Tensor& weights, const Tensor& grads, const Tensor& scalars, double lr,
                  int64_t t) const {
  for (const Segment& s : segments_) {
    // θ_opt = units·θ: θ -= (lr / units)·update + lr·wd·θ, which is lr·(update + wd·θ_opt) / units.
    const AdamWStep step{
        lr / s.units,   cfg_.b1, cfg_.b2, cfg_.eps, cfg_.eps_root, cfg_.weight_decay * s.units,
        cfg_.clip_norm, t};
    be_.adamw_step({.param = weights.flat_slice(s.begin, {s.count}),
                    .grad = grads.flat_slice(s.begin, {s.count}),
                    .m = m_.flat_slice(s.state_begin, {s.count}),
                    .v = v_.flat_slice(s.state_begin, {s.count}),
                    .step = step,
                    .scalars = scalars});
  }
}

void AdamW::step(const Tensor& weights, const Tensor& grads, const Tensor& scalars, double lr,
                 int64_t t) {
  const Tensor sum_sq = scalars.flat_slice(StepScalars::kGradSumSq, {1});
  be_.fill({.x = sum_sq, .value = 0.0});
  for (const Segment& s : segments_) add_squares(s, grads, sum_sq);
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

#include "gemmax/train/optimizer.h"

#include <cmath>

namespace gemmax {

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

AdamW::AdamW(Backend& be, int64_t num_params, DType dtype, const AdamWConfig& config)
    : be_(be), cfg_(config) {
  m_ = be.zeros({num_params}, dtype, MemKind::OptState);
  v_ = be.zeros({num_params}, dtype, MemKind::OptState);
}

GradNorms AdamW::step(const Tensor& weights, const Tensor& grads, double lr, int64_t t) {
  GradNorms norms;
  norms.raw = std::sqrt(be_.dot(grads, grads));
  const double scale =
      cfg_.clip_norm > 0 && norms.raw > cfg_.clip_norm ? cfg_.clip_norm / norms.raw : 1.0;
  norms.clipped = norms.raw * scale;
  AdamWStep s{lr, cfg_.b1, cfg_.b2, cfg_.eps, cfg_.eps_root, cfg_.weight_decay, scale, t};
  be_.adamw_step(weights, grads, m_, v_, s);
  return norms;
}

}  // namespace gemmax

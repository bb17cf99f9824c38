// A backend that runs another and times every op, by op family, with the products' FLOPs:
// the time split of `gemmax bench`. Each op ends with inner.synchronize() (a no-op on host
// backends), so an asynchronous backend's op is charged to its own family.
//
// Families follow the training step's parts: dense matmuls, grouped matmuls, attention, norms
// and elementwise ops, routing with permute / combine, the output head with its loss (every
// op of the step's output head, matmuls included), and the optimizer: the model marks those
// parts of the step with StepPart (base/memory.h), and each op's own family is in its
// declaration (backend/ops/op_list.h).
#pragma once

#include <array>
#include <chrono>
#include <string>

#include "gemmax/backend/backend.h"

namespace gemmax {

constexpr size_t kNumOpFamilies = size_t(OpFamily::kCount);
const char* op_family_name(OpFamily f);

struct OpProfile {
  std::array<double, kNumOpFamilies> seconds{};
  std::array<double, kNumOpFamilies> flops{};  // executed: products and attention
  std::array<int64_t, kNumOpFamilies> calls{};
  double total_seconds() const;
  double total_flops() const;
};

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}
  const OpProfile& profile() const { return profile_; }
  // Disabled, ops only pass through (a step at full speed).
  void set_enabled(bool on) { enabled_ = on; }
  void reset() { profile_ = OpProfile(); }

  std::string name() const override { return inner_.name(); }
  std::string describe() const override { return inner_.describe(); }
  MemoryTracker& tracker() override { return inner_.tracker(); }
  int64_t persistent_bytes() const override { return inner_.persistent_bytes(); }
  void synchronize() override { inner_.synchronize(); }

  Tensor alloc(const Shape& shape, DType dtype, MemKind kind) override {
    return inner_.alloc(shape, dtype, kind);
  }
  void upload(const Tensor& dst, const Tensor& host) override { inner_.upload(dst, host); }
  Tensor to_host(const Tensor& t) override { return inner_.to_host(t); }

 protected:
#define GEMMAX_OP_PROFILED(name, Args, family)                                       \
  void do_##name(const Args& args, OpDims<Args> dims) override {                     \
    run(OpFamily::family, flops(args, dims), [&] { inner_.do_##name(args, dims); }); \
  }
  GEMMAX_BACKEND_OPS(GEMMAX_OP_PROFILED)
#undef GEMMAX_OP_PROFILED

 public:
  // Executed FLOPs of the products (0 for the other ops).
  static double flops(const auto&, const auto&) { return 0; }
  static double flops(const MatmulArgs& a, NoDims);
  // gmm, gmm_dlhs, gmm_drhs: an [m, n] x [n, k] product each.
  static double flops(const auto&, const GmmDims& d) {
    return 2.0 * double(d.m) * double(d.n) * double(d.k);
  }
  static double flops(const AttentionForwardArgs& a, NoDims) { return attention_flops(a.shape, 2); }
  static double flops(const AttentionBackwardArgs& a, NoDims) {
    return attention_flops(a.shape, 5);
  }
  // FLOPs of `products` [S, hd] x [hd, keys] products over the visible (query, key) pairs of
  // one head (causal, windowed; segments not counted), times batch and heads.
  static double attention_flops(const AttentionShape& s, int products);

 private:
  template <class F>
  void run(OpFamily family, double flops, F&& op) {
    if (!enabled_) return op();
    switch (inner_.tracker().part()) {
      case StepPart::OutputHead:
        family = OpFamily::HeadLoss;
        break;
      case StepPart::Optimizer:
        family = OpFamily::Optimizer;
        break;
      case StepPart::Layers:
        break;
    }
    const auto t0 = std::chrono::steady_clock::now();
    op();
    inner_.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    profile_.seconds[size_t(family)] += s;
    profile_.flops[size_t(family)] += flops;
    profile_.calls[size_t(family)] += 1;
  }

  Backend& inner_;
  OpProfile profile_;
  bool enabled_ = true;
};

}  // namespace gemmax

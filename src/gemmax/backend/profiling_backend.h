// A backend that runs another and times every op, by op family, with the products' FLOPs:
// the time split of `gemmax bench`. Each op ends with inner.synchronize() (a no-op on host
// backends), so an asynchronous backend's op is charged to its own family.
//
// Families follow the training step's parts: dense matmuls, grouped matmuls, attention, norms
// and elementwise ops, routing with permute / combine, the output head with its loss (every
// op of the step's "output head" phase, matmuls included), and the optimizer (its phase).
#pragma once

#include <array>
#include <chrono>
#include <string>

#include "gemmax/backend/backend.h"

namespace gemmax {

enum class OpFamily : uint8_t {
  Matmul,
  GroupedMatmul,
  Attention,
  NormsElementwise,
  RoutingPermute,
  HeadLoss,
  Optimizer,
  kCount
};
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

  void fill(const Tensor& x, double v) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.fill(x, v); });
  }
  void copy(const Tensor& d, const Tensor& s) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.copy(d, s); });
  }
  void add(const Tensor& o, const Tensor& a, const Tensor& b) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.add(o, a, b); });
  }
  void axpy(const Tensor& y, double a, const Tensor& x) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.axpy(y, a, x); });
  }
  void scale(const Tensor& x, double a) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.scale(x, a); });
  }
  void sum_squares(const Tensor& s, const Tensor& x) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.sum_squares(s, x); });
  }
  void scaled_sum_forward(const Tensor& y, const Tensor& a, const Tensor& b,
                          const Tensor& s) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.scaled_sum_forward(y, a, b, s); });
  }
  void scaled_sum_backward(const Tensor& dab, const Tensor& ds, const Tensor& dy, const Tensor& a,
                           const Tensor& b, const Tensor& s) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.scaled_sum_backward(dab, ds, dy, a, b, s); });
  }
  void transpose_groups(const Tensor& o, const Tensor& i) override {
    run(OpFamily::GroupedMatmul, 0, [&] { inner_.transpose_groups(o, i); });
  }
  void matmul(const Tensor& c, const Tensor& a, bool ta, const Tensor& b, bool tb,
              bool acc) override {
    const double f = 2.0 * double(c.numel()) * double(ta ? a.dim(0) : a.dim(1));
    run(OpFamily::Matmul, f, [&] { inner_.matmul(c, a, ta, b, tb, acc); });
  }
  void embedding_forward(const Tensor& x, const Tensor& t, const Tensor& w, double s) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.embedding_forward(x, t, w, s); });
  }
  void embedding_backward(const Tensor& dw, const Tensor& dx, const Tensor& t, double s) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.embedding_backward(dw, dx, t, s); });
  }
  void rmsnorm_forward(const Tensor& y, const Tensor& r, const Tensor& x, const Tensor& w,
                       double eps, double os, const Tensor& res, bool rb) override {
    run(OpFamily::NormsElementwise, 0,
        [&] { inner_.rmsnorm_forward(y, r, x, w, eps, os, res, rb); });
  }
  void rmsnorm_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x,
                        const Tensor& w, const Tensor& r, double os, bool acc) override {
    run(OpFamily::NormsElementwise, 0,
        [&] { inner_.rmsnorm_backward(dx, dw, dy, x, w, r, os, acc); });
  }
  void rope_table(const Tensor& t, const Tensor& p, const Tensor& f) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.rope_table(t, p, f); });
  }
  void rope(const Tensor& x, const Tensor& t, bool inv) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.rope(x, t, inv); });
  }
  void attention_forward(const Tensor& o, const Tensor& lse, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& seg, const AttentionShape& s) override {
    run(OpFamily::Attention, attention_flops(s, 2),
        [&] { inner_.attention_forward(o, lse, q, k, v, seg, s); });
  }
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                          const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                          const Tensor& lse, const Tensor& seg, const AttentionShape& s) override {
    run(OpFamily::Attention, attention_flops(s, 5),
        [&] { inner_.attention_backward(dq, dk, dv, dout, q, k, v, o, lse, seg, s); });
  }
  void attention_decode(const Tensor& o, const Tensor& q, const Tensor& qp, const Tensor& k,
                        const Tensor& v, const Tensor& kp, int64_t w) override {
    run(OpFamily::Attention, 0, [&] { inner_.attention_decode(o, q, qp, k, v, kp, w); });
  }
  void geglu_forward(const Tensor& a, const Tensor& h, const Tensor& up) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.geglu_forward(a, h, up); });
  }
  void geglu_backward(const Tensor& dh, const Tensor& dup, const Tensor& da, const Tensor& h,
                      const Tensor& up) override {
    run(OpFamily::NormsElementwise, 0, [&] { inner_.geglu_backward(dh, dup, da, h, up); });
  }
  void router_forward(const Tensor& p, const Tensor& i, const Tensor& w, const Tensor& l,
                      const Tensor& s, bool r) override {
    run(OpFamily::RoutingPermute, 0, [&] { inner_.router_forward(p, i, w, l, s, r); });
  }
  void router_backward(const Tensor& dl, const Tensor& ds, const Tensor& dw, const Tensor& p,
                       const Tensor& i, const Tensor& s, bool r, const Tensor& lb,
                       int64_t seq) override {
    run(OpFamily::RoutingPermute, 0,
        [&] { inner_.router_backward(dl, ds, dw, p, i, s, r, lb, seq); });
  }
  void load_balance_forward(const Tensor& d, const Tensor& l, const Tensor& p, const Tensor& i,
                            int64_t seq, double c) override {
    run(OpFamily::RoutingPermute, 0, [&] { inner_.load_balance_forward(d, l, p, i, seq, c); });
  }
  void route_sort(const Routing& r, const Tensor& i, int64_t e) override {
    run(OpFamily::RoutingPermute, 0, [&] { inner_.route_sort(r, i, e); });
  }
  void permute(const Tensor& xs, const Tensor& x, const Tensor& o, int64_t k) override {
    run(OpFamily::RoutingPermute, 0, [&] { inner_.permute(xs, x, o, k); });
  }
  void permute_backward(const Tensor& dx, const Tensor& dxs, const Tensor& inv, int64_t k,
                        bool acc) override {
    run(OpFamily::RoutingPermute, 0, [&] { inner_.permute_backward(dx, dxs, inv, k, acc); });
  }
  void combine_forward(const Tensor& m, const Tensor& y, const Tensor& inv,
                       const Tensor& w) override {
    run(OpFamily::RoutingPermute, 0, [&] { inner_.combine_forward(m, y, inv, w); });
  }
  void combine_backward(const Tensor& dy, const Tensor& dw, const Tensor& dm, const Tensor& y,
                        const Tensor& o, const Tensor& w) override {
    run(OpFamily::RoutingPermute, 0, [&] { inner_.combine_backward(dy, dw, dm, y, o, w); });
  }
  void gmm(const Tensor& out, const Tensor& lhs, const Tensor& rhs, const Tensor& gs,
           const GmmRows& r) override {
    run(OpFamily::GroupedMatmul, 2.0 * double(out.numel()) * double(lhs.dim(1)),
        [&] { inner_.gmm(out, lhs, rhs, gs, r); });
  }
  void gmm_dlhs(const Tensor& dl, const Tensor& dout, const Tensor& rhs, const Tensor& gs,
                const GmmRows& r) override {
    run(OpFamily::GroupedMatmul, 2.0 * double(dl.numel()) * double(dout.dim(1)),
        [&] { inner_.gmm_dlhs(dl, dout, rhs, gs, r); });
  }
  void gmm_drhs(const Tensor& dr, const Tensor& lhs, const Tensor& dout, const Tensor& gs,
                const GmmRows& r) override {
    const double m = double(r.in.defined() ? r.in.numel() : lhs.dim(0));
    run(OpFamily::GroupedMatmul, 2.0 * m * double(dout.dim(1)) * double(lhs.dim(1)),
        [&] { inner_.gmm_drhs(dr, lhs, dout, gs, r); });
  }
  void softcap_cross_entropy(const Tensor& l, const Tensor& loss, const Tensor& t, const Tensor& m,
                             double cap, double gs, bool wg) override {
    run(OpFamily::HeadLoss, 0, [&] { inner_.softcap_cross_entropy(l, loss, t, m, cap, gs, wg); });
  }
  void vocab_ce_max(const Tensor& l, const Tensor& st, double cap) override {
    run(OpFamily::HeadLoss, 0, [&] { inner_.vocab_ce_max(l, st, cap); });
  }
  void vocab_ce_sums(const Tensor& l, const Tensor& st, const Tensor& t) override {
    run(OpFamily::HeadLoss, 0, [&] { inner_.vocab_ce_sums(l, st, t); });
  }
  void vocab_ce_finish(const Tensor& l, const Tensor& loss, const Tensor& st, const Tensor& t,
                       const Tensor& m, double cap, double gs, int64_t b, int64_t e,
                       bool wg) override {
    run(OpFamily::HeadLoss, 0,
        [&] { inner_.vocab_ce_finish(l, loss, st, t, m, cap, gs, b, e, wg); });
  }
  void adamw_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                  const AdamWStep& s, const Tensor& sc) override {
    run(OpFamily::Optimizer, 0, [&] { inner_.adamw_step(p, g, m, v, s, sc); });
  }

  // FLOPs of `products` [S, hd] x [hd, keys] products over the visible (query, key) pairs of
  // one head (causal, windowed; segments not counted), times batch and heads.
  static double attention_flops(const AttentionShape& s, int products);

 private:
  template <class F>
  void run(OpFamily family, double flops, F&& op) {
    if (!enabled_) return op();
    const std::string phase = inner_.tracker().phase();
    if (phase == "output head") family = OpFamily::HeadLoss;
    if (phase == "optimizer") family = OpFamily::Optimizer;
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

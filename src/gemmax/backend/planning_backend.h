// A backend that runs nothing and allocates nothing: it counts the bytes a step would allocate, in
// the order the model allocates them, in its own MemoryTracker.
//
// The memory plan of a run (train/memory_plan.h) is the peak of a training step run against a
// PlanningBackend wrapped around the backend that will train: the model's own allocation sequence,
// so that the plan follows whatever the backend and the model's switches do. Backends allocate only
// through alloc() (no memory of their own inside ops), so the plan equals what the real run
// measures; tests check that for every backend.
#pragma once

#include "gemmax/backend/backend.h"

namespace gemmax {

class PlanningBackend final : public Backend {
 public:
  explicit PlanningBackend(Backend& inner)
      : inner_(inner),
        persistent_(Tensor::planned({inner.persistent_bytes()}, DType::U8, MemKind::Workspace,
                                    tracker_)) {}

  std::string name() const override { return inner_.name(); }
  std::string describe() const override { return inner_.describe() + " (planning)"; }
  MemoryTracker& tracker() override { return tracker_; }

  Tensor alloc(const Shape& shape, DType dtype, MemKind kind) override {
    return Tensor::planned(shape, dtype, kind, tracker_);
  }
  void upload(const Tensor&, const Tensor&) override {}
  Tensor to_host(const Tensor& t) override { return t; }

  void fill(const Tensor&, double) override {}
  void copy(const Tensor&, const Tensor&) override {}
  void add(const Tensor&, const Tensor&, const Tensor&) override {}
  void axpy(const Tensor&, double, const Tensor&) override {}
  void scale(const Tensor&, double) override {}
  void sum_squares(const Tensor&, const Tensor&) override {}
  void scaled_sum_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void scaled_sum_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&) override {}
  void transpose_groups(const Tensor&, const Tensor&) override {}
  void matmul(const Tensor&, const Tensor&, bool, const Tensor&, bool, bool) override {}
  void embedding_forward(const Tensor&, const Tensor&, const Tensor&, double) override {}
  void embedding_backward(const Tensor&, const Tensor&, const Tensor&, double) override {}
  void rmsnorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, double,
                       const Tensor&, bool) override {}
  void rmsnorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, double, bool) override {}
  void rope_table(const Tensor&, const Tensor&, const Tensor&) override {}
  void rope(const Tensor&, const Tensor&, bool) override {}
  void attention_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const AttentionShape&) override {}
  void attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const AttentionShape&) override {}
  void attention_decode(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, int64_t) override {}
  void geglu_forward(const Tensor&, const Tensor&, const Tensor&) override {}
  void geglu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                      const Tensor&) override {}
  void router_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                      bool) override {}
  void router_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&, bool, const Tensor&, int64_t) override {}
  void load_balance_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                            double) override {}
  void route_sort(const Routing&, const Tensor&, int64_t) override {}
  void permute(const Tensor&, const Tensor&, const Tensor&, int64_t) override {}
  void permute_backward(const Tensor&, const Tensor&, const Tensor&, int64_t, bool) override {}
  void combine_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void combine_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&) override {}
  void gmm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const GmmRows&) override {}
  void gmm_dlhs(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                const GmmRows&) override {}
  void gmm_drhs(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                const GmmRows&) override {}
  void softcap_cross_entropy(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double,
                             double, bool) override {}
  void vocab_ce_max(const Tensor&, const Tensor&, double) override {}
  void vocab_ce_sums(const Tensor&, const Tensor&, const Tensor&) override {}
  void vocab_ce_finish(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       double, double, int64_t, int64_t, bool) override {}
  void adamw_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamWStep&,
                  const Tensor&) override {}

 private:
  Backend& inner_;
  MemoryTracker tracker_;
  Tensor persistent_;  // the inner backend's own scratch
};

}  // namespace gemmax

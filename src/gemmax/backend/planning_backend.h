// A backend that runs nothing and allocates nothing: it counts the bytes a step would allocate, in
// the order the model allocates them, in its own MemoryTracker.
//
// The memory plan of a run (train/memory_plan.h) is the peak of a training step run against a
// PlanningBackend wrapped around the backend that will train: the model's own allocation sequence,
// so that the plan follows whatever the backend and the model's switches do. Every tensor, and the
// cpu backend's kernel scratch (persistent_bytes, allocated once), goes through alloc(), so the
// plan equals what the real run's tracker measures; tests check that for every backend. Not
// counted, on either side: the small host std::vector scratch some ops keep for one call, at most
// per call: the reference attention backward 2 x seq x head_dim doubles per thread, its grouped
// matmuls one int32 per sorted row, a loss tile one double per row, the cpu RMSNorm backward one
// float per (row block, column), router ops a few values per expert. Every op's contract is still
// checked (the public entry points validate before calling do_<op>), so a plan also proves the
// step's shapes.
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

 protected:
#define GEMMAX_OP_NOTHING(name, Args, family) \
  void do_##name(const Args&, OpDims<Args>) override {}
  GEMMAX_BACKEND_OPS(GEMMAX_OP_NOTHING)
#undef GEMMAX_OP_NOTHING

 private:
  Backend& inner_;
  MemoryTracker tracker_;
  Tensor persistent_;  // the inner backend's own scratch
};

}  // namespace gemmax

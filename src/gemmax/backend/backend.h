// The Backend interface: the coarse ops the model is written against.
//
// The model (src/gemmax/model) calls these in order; each backend implements them for its device:
// `reference` (plain loops, the ground truth every other backend is tested against), `cpu` (its own
// bf16 product engine, vectorised fused kernels, OpenMP) and `cuda` (Hopper kernels).
//
// Each op is declared once, in backend/ops/: its argument struct with the contract, and one
// `validate` that the public entry point below runs before the backend's implementation (do_<op>),
// which receives the sizes validate derives (OpDims, backend/ops/op_args.h).
//
// Conventions:
// - Tensors are row-major and contiguous; 2-D shapes are [rows, cols].
// - Activations use the run's activation dtype (float32, float64, or bfloat16); per-row statistics
//   (RMSNorm rstd, attention log-sum-exp, router probabilities and combine weights) use
//   `stat_dtype(activation dtype)`.
// - Mixed precision (bf16 activations, fp32 master weights): matmul inputs share one dtype and
//   products accumulate in fp32 or wider; an output may be wider than the inputs (fp32 weight
//   gradients of bf16 activations: matmul, gmm_drhs, embedding_backward). Small weight vectors
//   (norm scales, per-expert scales, layer_scalar, the embedding table in the lookup) may be wider
//   than the activations and are applied at their own precision before the one rounding of the
//   output; their gradients are written in their own dtype.
// - Integer index tensors (tokens, positions, segment ids, expert ids, sort orders) are int32.
// - "accumulate" means out += result; otherwise out = result.
// - Weight-gradient outputs always accumulate, so that several microbatches (or the two uses of a
//   tied weight) can add into one buffer.
// - No op returns a value to the host: losses, the load-balance term and the gradient norm are
//   added into *device scalars* (float64 tensors of one element, or slots of the step's scalar
//   vector, StepScalars), which the host reads once per step. A backend may run ops asynchronously;
//   only to_host() waits.
// - Reductions run in a fixed order: for a given thread count, results are bit-identical from run
//   to run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gemmax/backend/ops/op_list.h"
#include "gemmax/base/memory.h"
#include "gemmax/base/tensor.h"

namespace gemmax {

// The scalars of one training step, slots of one float64 device vector [kCount]: the model adds its
// loss sums, the optimizer the gradient's sum of squares, and the host reads the vector once, after
// the update.
struct StepScalars {
  enum : int64_t {
    kCeSum,      // sum over counted targets of the cross-entropy
    kLbSum,      // sum over layers of each layer's weighted load-balance loss
    kGradSumSq,  // sum of squares of the (unclipped) gradient of the trained parameters
    kCount
  };
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "reference", "cpu", ...; `describe` adds what the backend chose (threads, ISA paths).
  virtual std::string name() const = 0;
  virtual std::string describe() const { return name(); }

  // ---- memory --------------------------------------------------------------------------- Every
  // allocation is counted in tracker(): the process-wide tracker, or a planning run's.
  virtual Tensor alloc(const Shape& shape, DType dtype, MemKind kind) = 0;  // uninitialised
  Tensor zeros(const Shape& shape, DType dtype, MemKind kind) {
    Tensor t = alloc(shape, dtype, kind);
    fill({.x = t, .value = 0.0});
    return t;
  }
  // Host <-> device copies. upload copies a host tensor into a device tensor of the same dtype and
  // size; to_host returns the tensor's contents on the host (the tensor itself on host backends)
  // and waits for every op issued before it: it is the one synchronisation point of a step.
  virtual void upload(const Tensor& dst, const Tensor& host) = 0;
  virtual Tensor to_host(const Tensor& t) = 0;
  // Waits for every op issued so far (a no-op on backends whose ops are synchronous).
  virtual void synchronize() {}
  Tensor to_device(const Tensor& host, MemKind kind) {
    Tensor t = alloc(host.shape(), host.dtype(), kind);
    upload(t, host);
    return t;
  }
  virtual MemoryTracker& tracker() { return MemoryTracker::global(); }
  // Memory the backend holds for its whole life (kernel scratch), allocated through alloc() when
  // it is built; a memory plan counts it as workspace (backend/planning_backend.h).
  virtual int64_t persistent_bytes() const { return 0; }

  // ---- the ops (backend/ops/): be.gmm({.out = y, .lhs = x, ...}) checks the contract, then runs
#define GEMMAX_OP_ENTRY(name, Args, family) \
  void name(const Args& args) { do_##name(args, validated(args)); }
  GEMMAX_BACKEND_OPS(GEMMAX_OP_ENTRY)
#undef GEMMAX_OP_ENTRY

 protected:
  // The implementations, called with validated arguments. The decorators forward to another
  // backend's implementations without validating again.
  friend class ProfilingBackend;
#define GEMMAX_OP_PURE(name, Args, family) \
  virtual void do_##name(const Args& args, OpDims<Args> dims) = 0;
  GEMMAX_REQUIRED_OPS(GEMMAX_OP_PURE)
#undef GEMMAX_OP_PURE
#define GEMMAX_OP_UNSUPPORTED(name, Args, family) \
  virtual void do_##name(const Args& args, OpDims<Args> dims);
  GEMMAX_VOCAB_LOSS_OPS(GEMMAX_OP_UNSUPPORTED)
#undef GEMMAX_OP_UNSUPPORTED
};

}  // namespace gemmax

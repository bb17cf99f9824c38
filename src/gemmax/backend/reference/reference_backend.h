// The reference backend: plain loops over host memory, fp32, bf16 or fp64, sums in fp64.
//
// It is the ground truth: every other backend's ops are tested against it, and its own ops are
// tested against finite differences in fp64. Loops are written to be obviously right first; OpenMP
// spreads the outer loop over cores so the tiny model still trains in minutes. Every sum runs in
// one fixed order, whatever the thread count.
#pragma once

#include "gemmax/backend/backend.h"

namespace gemmax {

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }

  Tensor alloc(const Shape& shape, DType dtype, MemKind kind) override;
  void upload(const Tensor& dst, const Tensor& host) override;
  Tensor to_host(const Tensor& t) override { return t; }

  // Public: the cpu backend runs its float64 ops and KV-cache attention on these.
  GEMMAX_BACKEND_OPS(GEMMAX_OP_OVERRIDE)
};

}  // namespace gemmax

// The soft-capped cross-entropy of a tile of logits.
#pragma once

#include "gemmax/backend/cuda/kernels/loss.h"
#include "gemmax/backend/cuda/ops/common.h"

namespace gemmax::cuda::ops {

template <class P>
void softcap_cross_entropy(P& p, const SoftcapCrossEntropyArgs& args, NoDims) {
  const auto& [logits, loss, targets, mask, cap, grad_scale, write_grad] = args;
  const int64_t C = logits.dim(0), V = logits.dim(1);
  check_scalar(loss, "softcap_cross_entropy");
  if (C == 0) return;
  dispatch<float, bf16>(logits, "softcap_cross_entropy", [&]<class E>() {
    // Rows in pieces whose per-row losses fit in scratch; each piece adds into the loss.
    Scratch s = p.scratch();
    const int64_t piece = kern::kmin<int64_t>(C, int64_t(s.left() / sizeof(double)) - 64);
    double* row_loss = s.take<double>(piece, "the cross-entropy's row losses");
    for (int64_t r0 = 0; r0 < C; r0 += piece) {
      const int64_t rows = kern::kmin(piece, C - r0);
      const kern::CrossEntropyArgs a{rows, V, cap, grad_scale, write_grad};
      Launch l = stride_launch(rows * 256, 256, 16384);
      l.smem = 8 * sizeof(float);
      p.template launch<kern::CrossEntropyKernel>(
          l, ptr<E>(logits) + r0 * V, row_loss, (const int32_t*)ptr<int32_t>(targets) + r0,
          (const int32_t*)ptr<int32_t>(mask) + r0, a, p.errors());
      Launch one;
      one.threads = kern::kSumThreads;
      one.smem = kern::kSumThreads / 32 * sizeof(double);
      p.template launch<kern::AddPartialsKernel>(one, ptr<double>(loss), (const double*)row_loss,
                                                 int(rows));
    }
  });
}

}  // namespace gemmax::cuda::ops

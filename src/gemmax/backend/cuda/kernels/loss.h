// The soft-capped cross-entropy on a tile of logits, with its gradient written in place.
#pragma once

#include "gemmax/backend/cuda/kernels/elementwise.h"

namespace gemmax::kern {

struct CrossEntropyArgs {
  int64_t C, V;
  double cap, grad_scale;
  bool write_grad;
};

// One block per row (grid-stride). Pass 1 applies the cap in place (the capped value rounded to
// the logits' dtype, as stored) and keeps a per-thread online max and sum; pass 2 writes the
// gradient. row_loss[row] = logsumexp(c) - c[target] for counted rows, else 0.
struct CrossEntropyKernel {
  static constexpr int kMaxThreads = 256;
  template <class X, class E>
  GEMMAX_KFN void operator()(X& x, E* logits, double* row_loss, const int32_t* targets,
                             const int32_t* mask, CrossEntropyArgs a, DeviceError* err) const {
    float* red = x.template smem<float>();
    for (int64_t r = x.bx(); r < a.C; r += x.gx()) {
      E* row = logits + r * a.V;
      float m = kNegInf, s = 0;
      for (int64_t v = x.tid(); v < a.V; v += x.nthreads()) {
        float c = to_acc(row[v]);
        if (a.cap > 0) {
          c = round_to<E>(float(a.cap) * ktanh(c / float(a.cap)));
          row[v] = from_acc<E>(c);
        }
        if (c > m) {
          s = m == kNegInf ? 0.0f : s * kexp(m - c);
          m = c;
        }
        s += kexp(c - m);
      }
      const float mx = group_max(x, m, x.nthreads(), red);
      s = group_sum(x, m == kNegInf ? 0.0f : s * kexp(m - mx), x.nthreads(), red);
      const float lse = mx + klog(s);
      const int32_t tgt = targets[r];
      bool counted = mask[r] != 0;
      if (counted && (tgt < 0 || tgt >= a.V)) {
        if (x.tid() == 0)
          record_error(x, err, DeviceError::kTargetOutOfRange, kOpCrossEntropy, tgt, r, a.V);
        counted = false;
      }
      if (x.tid() == 0) row_loss[r] = counted ? double(lse) - double(to_acc(row[tgt])) : 0.0;
      x.sync();  // row[tgt] is read before pass 2 overwrites it
      if (!a.write_grad) continue;
      const float g = counted ? float(a.grad_scale) : 0.0f;
      for (int64_t v = x.tid(); v < a.V; v += x.nthreads()) {
        const float c = to_acc(row[v]);
        float dc = g * (kexp(c - lse) - (counted && v == tgt ? 1.0f : 0.0f));
        if (a.cap > 0) dc *= 1.0f - (c / float(a.cap)) * (c / float(a.cap));
        row[v] = from_acc<E>(dc);
      }
    }
  }
};

}  // namespace gemmax::kern

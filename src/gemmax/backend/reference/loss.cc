// Soft-capped cross-entropy on a tile of logits, with its gradient written in place.
#include <algorithm>
#include <cmath>
#include <vector>

#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {

void ReferenceBackend::do_softcap_cross_entropy(const SoftcapCrossEntropyArgs& args, NoDims) {
  const auto& [logits, loss, targets, mask, cap, grad_scale, write_grad] = args;
  const int64_t C = logits.dim(0), V = logits.dim(1);
  const int32_t* tgt = targets.data<int32_t>();
  const int32_t* msk = mask.data<int32_t>();
  for (int64_t r = 0; r < C; ++r)  // checked before the parallel loop, which cannot throw
    GEMMAX_CHECK(msk[r] == 0 || (tgt[r] >= 0 && tgt[r] < V), "target id ", tgt[r],
                 " is outside the vocabulary [0, ", V, ")");
  std::vector<double> row_loss(size_t(C), 0.0);  // summed in row order below
  dispatch<float, bf16, double>(logits, "softcap_cross_entropy", [&]<class T>() {
    T* pl = logits.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < C; ++r) {
      T* row = pl + r * V;
      if (cap > 0)
        for (int64_t v = 0; v < V; ++v) row[v] = T(cap * std::tanh(double(row[v]) / cap));
      double mx = double(row[0]);
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
      const double lse = mx + std::log(sum);
      if (msk[r] != 0) row_loss[size_t(r)] = lse - double(row[tgt[r]]);
      if (!write_grad) continue;
      const double g = msk[r] != 0 ? grad_scale : 0.0;
      for (int64_t v = 0; v < V; ++v) {
        const double c = double(row[v]);
        double dc = g * (std::exp(c - lse) - (v == tgt[r] && msk[r] != 0 ? 1.0 : 0.0));
        if (cap > 0) dc *= 1.0 - (c / cap) * (c / cap);
        row[v] = T(dc);
      }
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;
  ref::add_to_scalar(loss, total);
}

namespace {

}  // namespace

void ReferenceBackend::do_vocab_ce_max(const VocabCeMaxArgs& args, NoDims) {
  const auto& [logits, stats, cap] = args;
  const int64_t R = logits.dim(0), V = logits.dim(1);
  double* mx = stats.data<double>();
  dispatch<float, bf16, double>(logits, "vocab_ce_max", [&]<class T>() {
    T* pl = logits.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < R; ++r) {
      T* row = pl + r * V;
      if (cap > 0)
        for (int64_t v = 0; v < V; ++v) row[v] = T(cap * std::tanh(double(row[v]) / cap));
      double m = -HUGE_VAL;
      for (int64_t v = 0; v < V; ++v) m = std::max(m, double(row[v]));
      mx[r] = m;
    }
  });
}

void ReferenceBackend::do_vocab_ce_sums(const VocabCeSumsArgs& args, NoDims) {
  const auto& [logits, stats, targets] = args;
  const int64_t R = logits.dim(0), V = logits.dim(1);
  double* st = stats.data<double>();
  const int32_t* tgt = targets.data<int32_t>();
  dispatch<float, bf16, double>(logits, "vocab_ce_sums", [&]<class T>() {
    const T* pl = logits.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < R; ++r) {
      const T* row = pl + r * V;
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - st[r]);
      st[R + r] = sum;
      st[2 * R + r] = tgt[r] >= 0 && tgt[r] < V ? double(row[tgt[r]]) : 0.0;
    }
  });
}

void ReferenceBackend::do_vocab_ce_finish(const VocabCeFinishArgs& args, NoDims) {
  const auto& [logits, loss, stats, targets, mask, cap, grad_scale, loss_begin, loss_end,
               write_grad] = args;
  const int64_t R = logits.dim(0), V = logits.dim(1);
  const double* st = stats.data<double>();
  const int32_t* tgt = targets.data<int32_t>();
  const int32_t* msk = mask.data<int32_t>();
  double total = 0;
  for (int64_t r = loss_begin; r < loss_end; ++r)
    if (msk[r] != 0) total += st[r] + std::log(st[R + r]) - st[2 * R + r];
  ref::add_to_scalar(loss, total);
  if (!write_grad) return;
  dispatch<float, bf16, double>(logits, "vocab_ce_finish", [&]<class T>() {
    T* pl = logits.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < R; ++r) {
      T* row = pl + r * V;
      const double lse = st[r] + std::log(st[R + r]);
      const double g = msk[r] != 0 ? grad_scale : 0.0;
      for (int64_t v = 0; v < V; ++v) {
        const double c = double(row[v]);
        double dc = g * (std::exp(c - lse) - (v == tgt[r] && msk[r] != 0 ? 1.0 : 0.0));
        if (cap > 0) dc *= 1.0 - (c / cap) * (c / cap);
        row[v] = T(dc);
      }
    }
  });
}

}  // namespace gemmax

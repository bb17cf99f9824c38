// The soft-capped cross-entropy of one vocabulary tile, with its gradient written in place:
// one parallel pass per row (cap, max, log-sum-exp, gradient), row losses summed in row order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"

namespace gemmax {
using namespace cpu;

namespace {

constexpr int64_t kSumChunk = 256;  // exponentials summed in fp32, then the chunks in fp64

// One row of V logits: caps them in place (rounded to T: bf16 logits are capped in bf16, then
// read in fp32, as MaxText does), returns log-sum-exp.
template <class T>
GEMMAX_SIMD_BODY double cap_row(T* row, int64_t V, float cap, float inv_cap) {
  float mx = -INFINITY;
  if (cap > 0) {
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < V; ++v) {
      const float c = round_f32<T>(cap * tanh_approx(to_f32(row[v]) * inv_cap));
      row[v] = from_f32<T>(c);
      mx = std::max(mx, c);
    }
  } else {
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, to_f32(row[v]));
  }
  double sum = 0;
  for (int64_t v0 = 0; v0 < V; v0 += kSumChunk) {
    const int64_t v1 = std::min(V, v0 + kSumChunk);
    float part = 0;
#pragma omp simd reduction(+ : part)
    for (int64_t v = v0; v < v1; ++v) part += exp_approx(to_f32(row[v]) - mx);
    sum += part;
  }
  return double(mx) + std::log(sum);
}

// dz = g softmax(c) (1 - (c / cap)^2), in place of the capped row (the caller subtracts the
// one-hot term at the target).
template <class T>
GEMMAX_SIMD_BODY void grad_row(T* row, int64_t V, float lse, float g, float cap, float inv_cap) {
#pragma omp simd
  for (int64_t v = 0; v < V; ++v) {
    const float c = to_f32(row[v]);
    const float soft = cap > 0 ? 1.0f - (c * inv_cap) * (c * inv_cap) : 1.0f;
    row[v] = from_f32<T>(g * exp_approx(c - lse) * soft);
  }
}

template <class T>
GEMMAX_AVX512 double cap_row_avx512(T* row, int64_t V, float cap, float inv_cap) {
  return cap_row(row, V, cap, inv_cap);
}
template <class T>
GEMMAX_AVX512 void grad_row_avx512(T* row, int64_t V, float lse, float g, float cap,
                                   float inv_cap) {
  grad_row(row, V, lse, g, cap, inv_cap);
}

}  // namespace

void CpuBackend::do_softcap_cross_entropy(const SoftcapCrossEntropyArgs& args, NoDims) {
  const auto& [logits, loss, targets, mask, cap, grad_scale, write_grad] = args;
  if (is_wide(logits)) return reference_.do_softcap_cross_entropy(args, {});
  const int64_t C = logits.dim(0), V = logits.dim(1);
  const int32_t* tgt = targets.data<int32_t>();
  const int32_t* msk = mask.data<int32_t>();
  for (int64_t r = 0; r < C; ++r)
    GEMMAX_CHECK(msk[r] == 0 || (tgt[r] >= 0 && tgt[r] < V), "target id ", tgt[r],
                 " is outside the vocabulary [0, ", V, ")");
  std::vector<double> row_loss(static_cast<size_t>(C), 0.0);
  const float fcap = float(std::max(cap, 0.0)), inv_cap = cap > 0 ? float(1.0 / cap) : 0.0f;
  const bool avx512 = wide_vectors(isa_);
  dispatch<float, bf16>(logits, "softcap_cross_entropy", [&]<class T>() {
    T* pl = logits.data<T>();
#pragma omp parallel for if (C * V > (1 << 16))
    for (int64_t r = 0; r < C; ++r) {
      T* row = pl + r * V;
      const double lse =
          avx512 ? cap_row_avx512(row, V, fcap, inv_cap) : cap_row(row, V, fcap, inv_cap);
      const bool counted = msk[r] != 0;
      // The target's capped logit, read before the row turns into its gradient.
      const float c_target = counted ? to_f32(row[tgt[r]]) : 0.0f;
      if (counted) row_loss[size_t(r)] = lse - double(c_target);
      if (!write_grad) continue;
      const float g = counted ? float(grad_scale) : 0.0f;
      if (avx512)
        grad_row_avx512(row, V, float(lse), g, fcap, inv_cap);
      else
        grad_row(row, V, float(lse), g, fcap, inv_cap);
      if (counted) {  // the one-hot term: - g (1 - (c / cap)^2) at the target
        const float soft = fcap > 0 ? 1.0f - (c_target * inv_cap) * (c_target * inv_cap) : 1.0f;
        row[tgt[r]] = from_f32<T>(to_f32(row[tgt[r]]) - g * soft);
      }
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;
  add_to_scalar(loss, total);
}

void CpuBackend::do_vocab_ce_max(const VocabCeMaxArgs& args, NoDims) {
  reference_.do_vocab_ce_max(args, {});
}
void CpuBackend::do_vocab_ce_sums(const VocabCeSumsArgs& args, NoDims) {
  reference_.do_vocab_ce_sums(args, {});
}
void CpuBackend::do_vocab_ce_finish(const VocabCeFinishArgs& args, NoDims) {
  reference_.do_vocab_ce_finish(args, {});
}

}  // namespace gemmax

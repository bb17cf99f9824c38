// Causal GQA attention with a sliding window and a segment mask, scale 1.0, softmax in fp64.
//
// The forward saves the log-sum-exp of each query row; the backward recomputes the
// probabilities from it (as flash attention does) instead of keeping [S, S] matrices.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gemmax/backend/reference/attention_rounded_softmax.h"
#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {
namespace {

// First key visible from query i (keys first..i, then filtered by segment).
inline int64_t first_key(int64_t i, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
}

}  // namespace

void ReferenceBackend::do_attention_forward(const AttentionForwardArgs& args, NoDims) {
  const auto& [o, lse, q, k, v, segment_ids, s] = args;
  const int64_t S = s.seq, H = s.num_heads, KV = s.num_kv_heads, hd = s.head_dim;
  const int64_t group = H / KV;
  const int32_t* seg = segment_ids.data<int32_t>();
  dispatch<float, bf16, double>(q, "attention_forward", [&]<class T>() {
    if (s.round_softmax) return ref::attention_forward_rounded_softmax<T, double>(args);
    const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
    T* po = o.data<T>();
    auto* plse = lse.data<ref::stat_t<T>>();
#pragma omp parallel
    {
      std::vector<double> score(S), acc(hd);
#pragma omp for collapse(2)
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t kvh = h / group;
          for (int64_t i = 0; i < S; ++i) {
            const int64_t ti = b * S + i;
            const T* qi = pq + (ti * H + h) * hd;
            double mx = -std::numeric_limits<double>::infinity();
            for (int64_t j = first_key(i, s.window); j <= i; ++j) {
              const int64_t tj = b * S + j;
              if (seg[tj] != seg[ti]) {
                score[j] = -std::numeric_limits<double>::infinity();
                continue;
              }
              const T* kj = pk + (tj * KV + kvh) * hd;
              double d = 0;
              for (int64_t c = 0; c < hd; ++c) d += double(qi[c]) * double(kj[c]);
              score[j] = s.round_scores ? double(T(d)) : d;
              mx = std::max(mx, score[j]);
            }
            double sum = 0;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t j = first_key(i, s.window); j <= i; ++j) {
              if (score[j] == -std::numeric_limits<double>::infinity()) continue;
              const double p = std::exp(score[j] - mx);
              sum += p;
              const T* vj = pv + ((b * S + j) * KV + kvh) * hd;
              for (int64_t c = 0; c < hd; ++c) acc[c] += p * double(vj[c]);
            }
            T* oi = po + (ti * H + h) * hd;
            for (int64_t c = 0; c < hd; ++c) oi[c] = T(acc[c] / sum);
            plse[(b * H + h) * S + i] = ref::stat_t<T>(mx + std::log(sum));
          }
        }
    }
  });
}

void ReferenceBackend::do_attention_backward(const AttentionBackwardArgs& args, NoDims) {
  const auto& [dq, dk, dv, dout, q, k, v, o, lse, segment_ids, s] = args;
  const int64_t S = s.seq, H = s.num_heads, KV = s.num_kv_heads, hd = s.head_dim;
  const int64_t group = H / KV;
  const int32_t* seg = segment_ids.data<int32_t>();
  dispatch<float, bf16, double>(q, "attention_backward", [&]<class T>() {
    if (s.round_softmax) return ref::attention_backward_rounded_softmax<T, double>(args);
    const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>(), *po = o.data<T>();
    const T* pdo = dout.data<T>();
    const auto* plse = lse.data<ref::stat_t<T>>();
    T *pdq = dq.data<T>(), *pdk = dk.data<T>(), *pdv = dv.data<T>();
    // One task per (sequence, kv head): it owns that kv head's dk and dv rows, which all the
    // query heads of its group add into.
#pragma omp parallel
    {
      std::vector<double> dk_acc(S * hd), dv_acc(S * hd), dq_acc(hd);
#pragma omp for collapse(2)
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t kvh = 0; kvh < KV; ++kvh) {
          std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
          std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
          for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
            for (int64_t i = 0; i < S; ++i) {
              const int64_t ti = b * S + i;
              const T* qi = pq + (ti * H + h) * hd;
              const T* doi = pdo + (ti * H + h) * hd;
              const T* oi = po + (ti * H + h) * hd;
              const double l = double(plse[(b * H + h) * S + i]);
              double delta = 0;  // do_i . o_i = sum_j p_ij (do_i . v_j)
              for (int64_t c = 0; c < hd; ++c) delta += double(doi[c]) * double(oi[c]);
              std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
              for (int64_t j = first_key(i, s.window); j <= i; ++j) {
                const int64_t tj = b * S + j;
                if (seg[tj] != seg[ti]) continue;
                const T* kj = pk + (tj * KV + kvh) * hd;
                const T* vj = pv + (tj * KV + kvh) * hd;
                double sc = 0, dp = 0;
                for (int64_t c = 0; c < hd; ++c) {
                  sc += double(qi[c]) * double(kj[c]);
                  dp += double(doi[c]) * double(vj[c]);
                }
                if (s.round_scores) sc = double(T(sc));
                const double p = std::exp(sc - l);
                const double ds_wide = p * (dp - delta);
                const double ds = s.round_scores ? double(T(ds_wide)) : ds_wide;
                for (int64_t c = 0; c < hd; ++c) {
                  dq_acc[c] += ds * double(kj[c]);
                  dk_acc[j * hd + c] += ds * double(qi[c]);
                  dv_acc[j * hd + c] += p * double(doi[c]);
                }
              }
              T* dqi = pdq + (ti * H + h) * hd;
              for (int64_t c = 0; c < hd; ++c) dqi[c] = T(dq_acc[c]);
            }
          for (int64_t j = 0; j < S; ++j)
            for (int64_t c = 0; c < hd; ++c) {
              pdk[((b * S + j) * KV + kvh) * hd + c] = T(dk_acc[j * hd + c]);
              pdv[((b * S + j) * KV + kvh) * hd + c] = T(dv_acc[j * hd + c]);
            }
        }
    }
  });
}

}  // namespace gemmax

// MaxText's dot_product attention with float32_qk_product=false and float32_logits=false: the
// softmax in the activation dtype T, rounded where XLA on the CPU rounds it (read from the
// optimised HLO of MaxText 0.2.5's `apply_attention_dot` under JAX 0.12; docs/TRAINING.md
// §1.2). Per query row, over its visible keys j (W = stat_t<T>: fp32, fp64 in fp64 runs):
//
//   s_j = T(q.k_j)          m = max_j s_j           e_j = exp(W(T(s_j - m)))   (e stays W)
//   l   = T(sum_j e_j)      p_j = T(e_j)            u = T(sum_j p_j v_j)
//   o   = T(u * (1/l))      (the division is a product by the W reciprocal of the T sum)
//
// The backward is JAX's autodiff of those ops, each cotangent in T, the products accumulated
// wide, the sums that autodiff adds (the transposes of broadcasts) accumulated in T term by
// term:
//
//   du  = T(do * (1/l))                             dP_j = T(du . v_j)
//   g   = sum_c in T of T(T(do_c * T(1/T(l*l))) * u_c)   (-g: the gradient of l)
//   dx_j = T(T(dP_j - g) * p_j)                     (through exp, whose T output is p_j)
//   dm  = sum_j in T of -dx_j; n = #{j : s_j = m}   (the max's gradient, shared by its ties)
//   ds_j = dx_j, or T(dx_j + T(dm / n)) where s_j = m
//   dq = T(sum_j ds_j k_j), dk_j = T(sum_i ds_ij q_i), dv_j = T(sum_i p_ij du_i)
//
// `Acc` is the type the products and the forward's sums accumulate in: double on the reference
// backend, float on the cpu backend (XLA's). In fp64 every rounding is exact and this is the
// plain softmax and its gradient (the max's share then vanishes). Work is split as the
// reference's attention splits it: (sequence, head) forward, (sequence, kv head) backward.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "gemmax/backend/ops/attention.h"
#include "gemmax/backend/reference/common.h"

namespace gemmax::ref {

template <class T, class Acc>
struct RoundedSoftmaxRow {
  using W = stat_t<T>;
  static double t(double x) { return double(T(x)); }      // rounded to T
  static double tw(double x) { return double(T(W(x))); }  // an op in W, its result in T

  const AttentionShape& s;
  const int32_t* seg;
  const T *q, *k, *v;
  // Per row: the visible keys [j0, i], their scores (-inf where the segment differs), p_j.
  std::vector<double> score, e, p, u;
  std::vector<Acc> ua;
  double m = 0, l = 0;
  int64_t j0 = 0;

  RoundedSoftmaxRow(const AttentionShape& shape, const int32_t* seg_ids, const T* pq, const T* pk,
                    const T* pv)
      : s(shape),
        seg(seg_ids),
        q(pq),
        k(pk),
        v(pv),
        score(size_t(shape.seq)),
        e(size_t(shape.seq)),
        p(size_t(shape.seq)),
        u(size_t(shape.head_dim)),
        ua(size_t(shape.head_dim)) {}

  // Query i of sequence b, head h: scores, max, exponentials, sum, probabilities and u.
  void forward(int64_t b, int64_t h, int64_t i) {
    const int64_t S = s.seq, H = s.num_heads, KV = s.num_kv_heads, hd = s.head_dim;
    const int64_t kvh = h / (H / KV), ti = b * S + i;
    const T* qi = q + (ti * H + h) * hd;
    j0 = s.window > 0 ? std::max<int64_t>(0, i - s.window + 1) : 0;
    m = -INFINITY;
    for (int64_t j = j0; j <= i; ++j) {
      const int64_t tj = b * S + j;
      if (seg[tj] != seg[ti]) {
        score[size_t(j)] = -INFINITY;
        continue;
      }
      const T* kj = k + (tj * KV + kvh) * hd;
      Acc d = 0;
      for (int64_t c = 0; c < hd; ++c) d += Acc(qi[c]) * Acc(kj[c]);
      score[size_t(j)] = t(double(d));
      m = std::max(m, score[size_t(j)]);
    }
    Acc sum = 0;
    for (int64_t j = j0; j <= i; ++j) {
      const bool seen = score[size_t(j)] != -INFINITY;
      e[size_t(j)] = seen ? double(std::exp(W(tw(score[size_t(j)] - m)))) : 0.0;
      p[size_t(j)] = t(e[size_t(j)]);
      sum += Acc(e[size_t(j)]);
    }
    l = t(double(sum));
    std::fill(ua.begin(), ua.end(), Acc(0));
    for (int64_t j = j0; j <= i; ++j) {  // each u[c] summed in key order
      if (p[size_t(j)] == 0) continue;
      const Acc pj = Acc(p[size_t(j)]);
      const T* vj = v + ((b * S + j) * KV + kvh) * hd;
      for (int64_t c = 0; c < hd; ++c) ua[size_t(c)] += pj * Acc(vj[c]);
    }
    for (int64_t c = 0; c < hd; ++c) u[size_t(c)] = t(double(ua[size_t(c)]));
  }
  double reciprocal() const { return double(W(1) / W(l)); }
};

template <class T, class Acc>
void attention_forward_rounded_softmax(const AttentionForwardArgs& args) {
  const auto& [o, lse, q, k, v, segment_ids, s] = args;
  using Row = RoundedSoftmaxRow<T, Acc>;
  using W = stat_t<T>;
  const int64_t S = s.seq, H = s.num_heads, hd = s.head_dim;
  T* po = o.data<T>();
  auto* plse = lse.data<stat_t<T>>();
#pragma omp parallel
  {
    Row row(s, segment_ids.data<int32_t>(), q.data<T>(), k.data<T>(), v.data<T>());
#pragma omp for collapse(2)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < S; ++i) {
          row.forward(b, h, i);
          const double rl = row.reciprocal();
          T* oi = po + ((b * S + i) * H + h) * hd;
          for (int64_t c = 0; c < hd; ++c) oi[c] = T(W(row.u[size_t(c)] * rl));
          plse[(b * H + h) * S + i] = stat_t<T>(row.m + std::log(row.l));  // for inspection only
        }
  }
}

template <class T, class Acc>
void attention_backward_rounded_softmax(const AttentionBackwardArgs& args) {
  const auto& [dq, dk, dv, dout, q, k, v, o, lse, segment_ids, s] = args;
  using Row = RoundedSoftmaxRow<T, Acc>;
  auto t = [](double x) { return Row::t(x); };
  auto tw = [](double x) { return Row::tw(x); };
  const int64_t S = s.seq, H = s.num_heads, KV = s.num_kv_heads, hd = s.head_dim, G = H / KV;
  const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>(), *pdo = dout.data<T>();
  T *pdq = dq.data<T>(), *pdk = dk.data<T>(), *pdv = dv.data<T>();
#pragma omp parallel
  {
    Row row(s, segment_ids.data<int32_t>(), pq, pk, pv);
    std::vector<Acc> dk_acc(size_t(S * hd)), dv_acc(size_t(S * hd));
    std::vector<Acc> dq_acc(static_cast<size_t>(hd));
    std::vector<double> du(static_cast<size_t>(hd)), dx(static_cast<size_t>(S));
#pragma omp for collapse(2)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t kvh = 0; kvh < KV; ++kvh) {
        std::fill(dk_acc.begin(), dk_acc.end(), Acc(0));
        std::fill(dv_acc.begin(), dv_acc.end(), Acc(0));
        for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h)
          for (int64_t i = 0; i < S; ++i) {
            row.forward(b, h, i);
            const int64_t ti = b * S + i;
            const T* doi = pdo + (ti * H + h) * hd;
            const T* qi = pq + (ti * H + h) * hd;
            const double rl = row.reciprocal();
            const double r2 = tw(1.0 / tw(row.l * row.l));
            double g = 0;  // accumulated in T, term by term
            for (int64_t c = 0; c < hd; ++c) {
              du[size_t(c)] = tw(double(doi[c]) * rl);
              g = tw(g + tw(tw(double(doi[c]) * r2) * row.u[size_t(c)]));
            }
            double dm = 0, ties = 0;
            for (int64_t j = row.j0; j <= i; ++j) {
              dx[size_t(j)] = 0;
              if (row.score[size_t(j)] == -INFINITY) continue;
              const T* vj = pv + ((b * S + j) * KV + kvh) * hd;
              Acc dp = 0;
              for (int64_t c = 0; c < hd; ++c) dp += Acc(du[size_t(c)]) * Acc(vj[c]);
              dx[size_t(j)] = tw(tw(t(double(dp)) - g) * row.p[size_t(j)]);
              dm = tw(dm - dx[size_t(j)]);
              ties += row.score[size_t(j)] == row.m;
            }
            const double share = tw(dm / ties);
            std::fill(dq_acc.begin(), dq_acc.end(), Acc(0));
            for (int64_t j = row.j0; j <= i; ++j) {
              if (row.score[size_t(j)] == -INFINITY) continue;
              const double ds =
                  row.score[size_t(j)] == row.m ? tw(dx[size_t(j)] + share) : dx[size_t(j)];
              const T* kj = pk + ((b * S + j) * KV + kvh) * hd;
              const double pj = row.p[size_t(j)];
              for (int64_t c = 0; c < hd; ++c) {
                dq_acc[size_t(c)] += Acc(ds) * Acc(kj[c]);
                dk_acc[size_t(j * hd + c)] += Acc(ds) * Acc(qi[c]);
                dv_acc[size_t(j * hd + c)] += Acc(pj) * Acc(du[size_t(c)]);
              }
            }
            T* dqi = pdq + (ti * H + h) * hd;
            for (int64_t c = 0; c < hd; ++c) dqi[c] = T(dq_acc[size_t(c)]);
          }
        for (int64_t j = 0; j < S; ++j)
          for (int64_t c = 0; c < hd; ++c) {
            pdk[((b * S + j) * KV + kvh) * hd + c] = T(dk_acc[size_t(j * hd + c)]);
            pdv[((b * S + j) * KV + kvh) * hd + c] = T(dv_acc[size_t(j * hd + c)]);
          }
      }
  }
}

}  // namespace gemmax::ref

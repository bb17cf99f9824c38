// Attention of new tokens over a KV cache, for incremental decoding. The mask is
// attention_forward's on one segment, expressed through the positions each cache slot holds
// rather than through the row index, so a ring buffer's slots may be in any order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {
namespace {

inline bool visible(int32_t key_pos, int32_t query_pos, int64_t window) {
  return key_pos >= 0 && key_pos <= query_pos &&
         (window == 0 || int64_t(key_pos) > int64_t(query_pos) - window);
}

}  // namespace

void ReferenceBackend::do_attention_decode(const AttentionDecodeArgs& args, NoDims) {
  const auto& [o, q, q_pos, k, v, kv_pos, window] = args;
  const int64_t n = q.dim(0), H = q.dim(1), hd = q.dim(2), C = k.dim(0), KV = k.dim(1);
  const int64_t group = H / KV;
  const int32_t* qp = q_pos.data<int32_t>();
  const int32_t* kp = kv_pos.data<int32_t>();
  // Checked here because the parallel loop below cannot throw.
  for (int64_t i = 0; i < n; ++i) {
    bool any = false;
    for (int64_t c = 0; c < C && !any; ++c) any = visible(kp[c], qp[i], window);
    GEMMAX_CHECK(any, "attention_decode: the query at position ", qp[i],
                 " sees no cache slot; write its own key before attending");
  }
  dispatch<float, bf16, double>(q, "attention_decode", [&]<class T>() {
    const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
    T* po = o.data<T>();
#pragma omp parallel
    {
      std::vector<double> score(C), acc(hd);
#pragma omp for collapse(2)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t kvh = h / group;
          const T* qi = pq + (i * H + h) * hd;
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t c = 0; c < C; ++c) {
            if (!visible(kp[c], qp[i], window)) continue;
            const T* kc = pk + (c * KV + kvh) * hd;
            double d = 0;
            for (int64_t e = 0; e < hd; ++e) d += double(qi[e]) * double(kc[e]);
            score[c] = d;
            mx = std::max(mx, d);
          }
          double sum = 0;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t c = 0; c < C; ++c) {
            if (!visible(kp[c], qp[i], window)) continue;
            const double p = std::exp(score[c] - mx);
            sum += p;
            const T* vc = pv + (c * KV + kvh) * hd;
            for (int64_t e = 0; e < hd; ++e) acc[e] += p * double(vc[e]);
          }
          T* oi = po + (i * H + h) * hd;
          for (int64_t e = 0; e < hd; ++e) oi[e] = T(acc[e] / sum);
        }
    }
  });
}

}  // namespace gemmax

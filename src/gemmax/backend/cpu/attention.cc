// Blocked attention with an online softmax (the flash-attention algorithm), forward and
// backward, on the product engine's tiles.
//
// Work is split by (sequence, kv head): the query heads of one kv head attend together, so a
// block of queries is `positions x group heads` rows sharing one K and V (GQA without copying
// K/V per head). Keys come in blocks of 64; a block of queries visits only the key blocks that
// intersect its causal, windowed range: blocks above the diagonal or outside the sliding
// window are skipped, never masked. Inside a visited block the mask (causal, window, segment)
// is applied elementwise. Softmax statistics are fp32; probabilities enter the second product
// in the activation dtype, as MaxText's bf16 attention does.
//
// Memory is O(block) per thread: packed K and V panels of one key block, the score and
// probability blocks, the query block's output (or dQ) accumulator in fp32; the backward adds
// fp32 dK / dV accumulators for a chunk of keys (the whole sequence when it fits, else
// chunks, revisiting the queries per chunk). Nothing of size [S, S] exists.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/dispatch.h"
#include "gemmax/backend/cpu/gemm_kernels.h"
#include "gemmax/backend/cpu/vec_math.h"

namespace gemmax {
using namespace cpu;

namespace {

constexpr int64_t kKeyBlock = 64;    // keys per block
constexpr int64_t kQueryRows = 128;  // query rows (positions x group heads) per block

// Bump allocation from one thread's scratch.
struct Arena {
  char* p;
  int64_t left;
  template <class U>
  U* take(int64_t n) {
    const int64_t bytes = round_up(n * int64_t(sizeof(U)), 64);
    GEMMAX_CHECK(bytes <= left, "attention: block scratch exhausted (", bytes, " more bytes)");
    U* r = reinterpret_cast<U*>(p);
    p += bytes;
    left -= bytes;
    return r;
  }
};

struct Geometry {
  int64_t B, S, H, KV, hd, G, W;
  int64_t bq;  // query positions per block
  Geometry(const AttentionShape& s)
      : B(s.batch),
        S(s.seq),
        H(s.num_heads),
        KV(s.num_kv_heads),
        hd(s.head_dim),
        G(s.num_heads / s.num_kv_heads),
        W(s.window),
        bq(std::max<int64_t>(1, kQueryRows / (s.num_heads / s.num_kv_heads))) {}
  // First key visible to any query in [i0, ...): the window's start for i0.
  int64_t first_key(int64_t i0) const { return W > 0 ? std::max<int64_t>(0, i0 - W + 1) : 0; }
  bool visible(int64_t i, int64_t j, const int32_t* seg) const {
    return j <= i && (W == 0 || j > i - W) && seg[i] == seg[j];
  }
};

void check(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& lse,
           const Tensor& seg, const AttentionShape& s) {
  const int64_t T = s.batch * s.seq;
  GEMMAX_CHECK(s.num_kv_heads > 0 && s.num_heads % s.num_kv_heads == 0, "attention: ", s.num_heads,
               " query heads are not a multiple of ", s.num_kv_heads, " kv heads");
  GEMMAX_CHECK(q.numel() == T * s.num_heads * s.head_dim && o.numel() == q.numel() &&
                   k.numel() == T * s.num_kv_heads * s.head_dim && v.numel() == k.numel() &&
                   lse.numel() == s.batch * s.num_heads * s.seq && seg.numel() == T &&
                   lse.dtype() == DType::F32,
               "attention shapes: q ", q.str(), " k ", k.str(), " v ", v.str(), " o ", o.str(),
               " lse ", lse.str());
}

// The rows of a query block: row r is position i0 + r / G, head g * G + r % G.
template <class T>
void block_rows(const T* base, const Geometry& g, int64_t b, int64_t kvh, int64_t i0, int64_t rows,
                const T** out) {
  for (int64_t r = 0; r < rows; ++r)
    out[r] = base + ((b * g.S + i0 + r / g.G) * g.H + kvh * g.G + r % g.G) * g.hd;
}

// Packs key block [j0, j1) of k (or v) for kv head kvh: as B = X^T (rows of X are the keys:
// the score product q . k^T and dP = dO . v^T) or as B = X (the products p . v and dS . k).
template <class T>
void pack_keys(const GemmKernels<T>& K, T* panels, int64_t panel_elems, const T* x,
               const Geometry& g, int64_t b, int64_t kvh, int64_t j0, int64_t j1, bool transposed) {
  const BMatrix<T> m{x + ((b * g.S + j0) * g.KV + kvh) * g.hd, g.KV * g.hd, transposed};
  const int64_t n = transposed ? j1 - j0 : g.hd, kc = transposed ? g.hd : j1 - j0;
  for (int64_t j = 0, p = 0; j < n; j += kPanelCols, ++p)
    K.pack_b(panels + p * panel_elems, m, 0, kc, j, std::min<int64_t>(kPanelCols, n - j));
}

template <class T>
void forward(Isa isa, const Geometry& g, const T* q, const T* k, const T* v, const int32_t* seg,
             T* o, float* lse, const std::vector<void*>& scratch, int64_t scratch_bytes) {
  const GemmKernels<T>& K = kernels<T>(isa);
  constexpr int64_t P = kPair<T>;
  const int64_t nqb = (g.S + g.bq - 1) / g.bq, tasks = g.B * g.KV * nqb;
  const int64_t kt_elems = round_up(g.hd, P) * kPanelCols;      // one K^T panel: 32 keys
  const int64_t v_elems = round_up(kKeyBlock, P) * kPanelCols;  // one V panel: 32 columns
  const int64_t hd_panels = (g.hd + kPanelCols - 1) / kPanelCols;
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / (g.KV * nqb), kvh = (task / nqb) % g.KV, qb = task % nqb;
    const int64_t i0 = qb * g.bq, i1 = std::min(g.S, i0 + g.bq), rows = (i1 - i0) * g.G;
    Arena arena{static_cast<char*>(scratch[size_t(omp_get_thread_num())]), scratch_bytes};
    T* kt = arena.take<T>(2 * kt_elems);
    T* vp = arena.take<T>(hd_panels * v_elems);
    float* s = arena.take<float>(rows * kKeyBlock);
    T* p = arena.take<T>(rows * kKeyBlock);
    float* acc = arena.take<float>(rows * g.hd);
    float* m = arena.take<float>(rows);
    float* l = arena.take<float>(rows);
    const T** qrows = arena.take<const T*>(rows);
    const T** prows = arena.take<const T*>(rows);
    float** srows = arena.take<float*>(rows);
    float** arows = arena.take<float*>(rows);
    block_rows(q, g, b, kvh, i0, rows, qrows);
    for (int64_t r = 0; r < rows; ++r) {
      prows[r] = p + r * kKeyBlock;
      srows[r] = s + r * kKeyBlock;
      arows[r] = acc + r * g.hd;
      m[r] = -INFINITY;
      l[r] = 0;
    }
    std::fill_n(acc, rows * g.hd, 0.0f);
    const int32_t* sseg = seg + b * g.S;
    for (int64_t j0 = g.first_key(i0); j0 < i1; j0 += kKeyBlock) {
      const int64_t j1 = std::min(i1, j0 + kKeyBlock), nk = j1 - j0;
      pack_keys(K, kt, kt_elems, k, g, b, kvh, j0, j1, true);
      serial_product(K, rows, qrows, P, kt, kt_elems, g.hd, nk, srows, false);
      for (int64_t r = 0; r < rows; ++r) {  // masked online softmax of the row
        const int64_t i = i0 + r / g.G;
        float* sr = srows[r];
        float mx = -INFINITY;
        for (int64_t j = 0; j < nk; ++j) {
          if (!g.visible(i, j0 + j, sseg)) sr[j] = -INFINITY;
          mx = std::max(mx, sr[j]);
        }
        T* pr = p + r * kKeyBlock;
        const float m_new = std::max(m[r], mx);
        if (m_new == -INFINITY) {  // nothing visible yet
          std::fill_n(pr, nk, T{});
          continue;
        }
        const float alpha = exp_approx(m[r] - m_new);
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < nk; ++j) {
          const float e = exp_approx(sr[j] - m_new);
          pr[j] = from_f32<T>(e);
          sum += e;
        }
        l[r] = l[r] * alpha + sum;
        m[r] = m_new;
        if (alpha != 1.0f) {
          float* ar = arows[r];
#pragma omp simd
          for (int64_t c = 0; c < g.hd; ++c) ar[c] *= alpha;
        }
      }
      pack_keys(K, vp, v_elems, v, g, b, kvh, j0, j1, false);
      serial_product(K, rows, prows, P, vp, v_elems, nk, g.hd, arows, true);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r / g.G, h = kvh * g.G + r % g.G;
      T* orow = o + ((b * g.S + i) * g.H + h) * g.hd;
      const float inv = 1.0f / l[r];
#pragma omp simd
      for (int64_t c = 0; c < g.hd; ++c) orow[c] = from_f32<T>(arows[r][c] * inv);
      lse[(b * g.H + h) * g.S + i] = m[r] + std::log(l[r]);
    }
  }
}

template <class T>
void backward(Isa isa, const Geometry& g, const T* q, const T* k, const T* v, const T* o,
              const T* dout, const float* lse, const int32_t* seg, T* dq, T* dk, T* dv,
              const std::vector<void*>& scratch, int64_t scratch_bytes) {
  const GemmKernels<T>& K = kernels<T>(isa);
  constexpr int64_t P = kPair<T>;
  const int64_t nqb = (g.S + g.bq - 1) / g.bq, tasks = g.B * g.KV;
  const int64_t max_rows = g.bq * g.G, rows_pad = round_up(max_rows, P);
  const int64_t kt_elems = round_up(g.hd, P) * kPanelCols;
  const int64_t kp_elems = round_up(kKeyBlock, P) * kPanelCols;
  const int64_t tn_elems = rows_pad * kPanelCols;  // a panel of dO or Q reduced over rows
  const int64_t hd_panels = (g.hd + kPanelCols - 1) / kPanelCols;
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / g.KV, kvh = task % g.KV;
    Arena arena{static_cast<char*>(scratch[size_t(omp_get_thread_num())]), scratch_bytes};
    T* kt = arena.take<T>(2 * kt_elems);          // K^T panels (scores)
    T* vt = arena.take<T>(2 * kt_elems);          // V^T panels (dP = dO . V^T)
    T* kp = arena.take<T>(hd_panels * kp_elems);  // K panels (dQ = dS . K)
    T* tn = arena.take<T>(tn_elems);              // one panel of dO or Q over the rows
    T* at = arena.take<T>(rows_pad * kKeyBlock);  // P^T or dS^T packed
    float* s = arena.take<float>(max_rows * kKeyBlock);
    float* dp = arena.take<float>(max_rows * kKeyBlock);
    T* p = arena.take<T>(max_rows * kKeyBlock);
    T* ds = arena.take<T>(max_rows * kKeyBlock);
    float* dqacc = arena.take<float>(max_rows * g.hd);
    float* delta = arena.take<float>(g.S * g.G);
    int32_t* rowmap = arena.take<int32_t>(max_rows);
    const T** qrows = arena.take<const T*>(max_rows);
    const T** dorows = arena.take<const T*>(max_rows);
    const T** prows = arena.take<const T*>(max_rows);
    const T** dsrows = arena.take<const T*>(max_rows);
    float** srows = arena.take<float*>(max_rows);
    float** dprows = arena.take<float*>(max_rows);
    float** dqrows = arena.take<float*>(max_rows);
    const T** arow = arena.take<const T*>(kTileRows);
    float** crow = arena.take<float*>(kTileRows);
    // What is left holds the fp32 dK and dV of a chunk of keys.
    const int64_t chunk = std::max<int64_t>(
        kKeyBlock, std::min<int64_t>(g.S, arena.left / (2 * g.hd * int64_t(sizeof(float)) + 128)));
    float* dkacc = arena.take<float>(chunk * g.hd);
    float* dvacc = arena.take<float>(chunk * g.hd);
    for (int64_t r = 0; r < max_rows; ++r) {
      rowmap[r] = int32_t((r / g.G) * g.H + r % g.G);
      prows[r] = p + r * kKeyBlock;
      dsrows[r] = ds + r * kKeyBlock;
      srows[r] = s + r * kKeyBlock;
      dprows[r] = dp + r * kKeyBlock;
      dqrows[r] = dqacc + r * g.hd;
    }
    // delta_i = dO_i . O_i per query row.
    for (int64_t i = 0; i < g.S; ++i)
      for (int64_t hh = 0; hh < g.G; ++hh) {
        const int64_t off = ((b * g.S + i) * g.H + kvh * g.G + hh) * g.hd;
        float d = 0;
#pragma omp simd reduction(+ : d)
        for (int64_t c = 0; c < g.hd; ++c) d += to_f32(dout[off + c]) * to_f32(o[off + c]);
        delta[i * g.G + hh] = d;
      }
    const int32_t* sseg = seg + b * g.S;
    const bool chunked = chunk < g.S;
    if (chunked)  // dQ adds up over the chunks
      for (int64_t i = 0; i < g.S; ++i)
        std::fill_n(dq + ((b * g.S + i) * g.H + kvh * g.G) * g.hd, g.G * g.hd, T{});
    for (int64_t c0 = 0; c0 < g.S; c0 += chunk) {
      const int64_t c1 = std::min(g.S, c0 + chunk);
      std::fill_n(dkacc, (c1 - c0) * g.hd, 0.0f);
      std::fill_n(dvacc, (c1 - c0) * g.hd, 0.0f);
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t i0 = qb * g.bq, i1 = std::min(g.S, i0 + g.bq), rows = (i1 - i0) * g.G;
        const int64_t lo = std::max(c0, g.first_key(i0)), hi = std::min(c1, i1);
        if (lo >= hi) continue;
        block_rows(q, g, b, kvh, i0, rows, qrows);
        block_rows(dout, g, b, kvh, i0, rows, dorows);
        const Rows<const T> q_rows{q + ((b * g.S + i0) * g.H + kvh * g.G) * g.hd, g.hd, rowmap};
        const Rows<const T> do_rows{dout + ((b * g.S + i0) * g.H + kvh * g.G) * g.hd, g.hd, rowmap};
        std::fill_n(dqacc, rows * g.hd, 0.0f);
        for (int64_t j0 = lo; j0 < hi; j0 += kKeyBlock) {
          const int64_t j1 = std::min(hi, j0 + kKeyBlock), nk = j1 - j0;
          pack_keys(K, kt, kt_elems, k, g, b, kvh, j0, j1, true);
          pack_keys(K, vt, kt_elems, v, g, b, kvh, j0, j1, true);
          serial_product(K, rows, qrows, P, kt, kt_elems, g.hd, nk, srows, false);
          serial_product(K, rows, dorows, P, vt, kt_elems, g.hd, nk, dprows, false);
          for (int64_t r = 0; r < rows; ++r) {  // P = exp(S - lse), dS = P (dP - delta)
            const int64_t i = i0 + r / g.G, h = kvh * g.G + r % g.G;
            const float lse_r = lse[(b * g.H + h) * g.S + i], dl = delta[i * g.G + r % g.G];
            for (int64_t j = 0; j < nk; ++j) {
              const float pv = g.visible(i, j0 + j, sseg) ? exp_approx(srows[r][j] - lse_r) : 0.0f;
              p[r * kKeyBlock + j] = from_f32<T>(pv);
              ds[r * kKeyBlock + j] = from_f32<T>(pv * (dprows[r][j] - dl));
            }
          }
          // dV[j] += sum_r P[r][j] dO[r];  dK[j] += sum_r dS[r][j] Q[r]: reduced over rows.
          const int64_t mc_pad = round_up(rows, P);
          for (int pass = 0; pass < 2; ++pass) {
            const Rows<const T> a{pass == 0 ? p : ds, kKeyBlock};
            const Rows<const T>& x = pass == 0 ? do_rows : q_rows;
            float* accum = (pass == 0 ? dvacc : dkacc) + (j0 - c0) * g.hd;
            K.pack_at(at, a, 0, rows, 0, nk);
            for (int64_t c = 0; c < g.hd; c += kPanelCols) {
              const int64_t nj = std::min<int64_t>(kPanelCols, g.hd - c);
              pack_rows_panel(K, tn, x, 0, rows, c, nj);
              for (int64_t t0 = 0; t0 < nk; t0 += kTileRows) {
                const int tr = int(std::min<int64_t>(kTileRows, nk - t0));
                for (int t = 0; t < tr; ++t) {
                  arow[t] = at + (t0 + t) * P;
                  crow[t] = accum + (t0 + t) * g.hd + c;
                }
                K.tile_to_f32(tr, arow, nk * P, tn, mc_pad, crow, nj, true);
              }
            }
          }
          // dQ += dS . K
          pack_keys(K, kp, kp_elems, k, g, b, kvh, j0, j1, false);
          serial_product(K, rows, dsrows, P, kp, kp_elems, nk, g.hd, dqrows, true);
        }
        for (int64_t r = 0; r < rows; ++r) {
          T* out = dq + ((b * g.S + i0 + r / g.G) * g.H + kvh * g.G + r % g.G) * g.hd;
          for (int64_t c = 0; c < g.hd; ++c)
            out[c] = from_f32<T>(chunked ? to_f32(out[c]) + dqrows[r][c] : dqrows[r][c]);
        }
      }
      for (int64_t j = c0; j < c1; ++j) {
        T* krow = dk + ((b * g.S + j) * g.KV + kvh) * g.hd;
        T* vrow = dv + ((b * g.S + j) * g.KV + kvh) * g.hd;
        for (int64_t c = 0; c < g.hd; ++c) {
          krow[c] = from_f32<T>(dkacc[(j - c0) * g.hd + c]);
          vrow[c] = from_f32<T>(dvacc[(j - c0) * g.hd + c]);
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& o, const Tensor& lse, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const Tensor& segment_ids,
                                   const AttentionShape& shape) {
  if (is_wide(q)) return reference_.attention_forward(o, lse, q, k, v, segment_ids, shape);
  check(q, k, v, o, lse, segment_ids, shape);
  const Geometry g(shape);
  dispatch(q, [&]<class T>() {
    forward<T>(isa_, g, q.data<T>(), k.data<T>(), v.data<T>(), segment_ids.data<int32_t>(),
               o.data<T>(), lse.data<float>(), attention_scratch_, attention_scratch_bytes_);
  });
}

void CpuBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& o, const Tensor& lse,
                                    const Tensor& segment_ids, const AttentionShape& shape) {
  if (is_wide(q))
    return reference_.attention_backward(dq, dk, dv, dout, q, k, v, o, lse, segment_ids, shape);
  check(q, k, v, o, lse, segment_ids, shape);
  const Geometry g(shape);
  dispatch(q, [&]<class T>() {
    backward<T>(isa_, g, q.data<T>(), k.data<T>(), v.data<T>(), o.data<T>(), dout.data<T>(),
                lse.data<float>(), segment_ids.data<int32_t>(), dq.data<T>(), dk.data<T>(),
                dv.data<T>(), attention_scratch_, attention_scratch_bytes_);
  });
}

}  // namespace gemmax

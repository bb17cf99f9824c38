// Blocked attention with an online softmax (the flash-attention algorithm), forward and
// backward, on the product engine's tiles.
//
// Work is split by (sequence, kv head): the query heads of one kv head attend together, so a
// block of queries is `positions x group heads` rows sharing one K and V (GQA without copying
// K/V per head). With fewer such pairs than threads (one sequence on one kv head, as gemma4-e2b
// trains at batch 1), a pair's query blocks are split into runs of equal work: the forward's
// runs are independent, the backward's each sum dK and dV over the sequence in their thread's
// scratch, added in run order after. Keys come in blocks of 128; a block of queries visits only the
// key blocks that intersect its causal, windowed range: blocks above the diagonal or outside the
// sliding window are skipped, never masked. Inside a visited block the mask (causal, window,
// segment) is applied elementwise. Softmax statistics are fp32; probabilities enter the second
// product in the activation dtype, as MaxText's bf16 attention does.
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

#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/gemm_kernels.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"
#include "gemmax/backend/reference/attention_rounded_softmax.h"

namespace gemmax {
using namespace cpu;

namespace {

constexpr int64_t kKeyBlock = 128;                      // keys per block
constexpr int64_t kKeyPanels = kKeyBlock / kPanelCols;  // K^T panels of 32 keys per block
static_assert(kKeyBlock % kPanelCols == 0);
constexpr int64_t kQueryRows = 128;  // query rows (positions x group heads) per block

// Bump allocation from one thread's scratch; with no memory (null), a dry run that lays the
// blocks out to learn what fits.
struct Arena {
  char* p;
  int64_t left;
  template <class U>
  U* take(int64_t n) {
    const int64_t bytes = round_up(n * int64_t(sizeof(U)), 64);
    GEMMAX_CHECK(bytes <= left, "attention: block scratch exhausted (", bytes, " more bytes)");
    U* r = reinterpret_cast<U*>(p);
    if (p) p += bytes;
    left -= bytes;
    return r;
  }
};

struct Geometry {
  int64_t B, S, H, KV, hd, G, W;
  int64_t bq;  // query positions per block
  bool round_scores;
  Geometry(const AttentionShape& s)
      : B(s.batch),
        S(s.seq),
        H(s.num_heads),
        KV(s.num_kv_heads),
        hd(s.head_dim),
        G(s.num_heads / s.num_kv_heads),
        W(s.window),
        bq(std::max<int64_t>(1, kQueryRows / (s.num_heads / s.num_kv_heads))),
        round_scores(s.round_scores) {}
  // First key visible to any query in [i0, ...): the window's start for i0.
  int64_t first_key(int64_t i0) const { return W > 0 ? std::max<int64_t>(0, i0 - W + 1) : 0; }
  bool visible(int64_t i, int64_t j, const int32_t* seg) const {
    return j <= i && (W == 0 || j > i - W) && seg[i] == seg[j];
  }
};

// The cpu kernels write float32 statistics (float64 runs take the reference's loops).
void check(const Tensor& lse) {
  GEMMAX_CHECK(lse.dtype() == DType::F32, "cpu backend: attention: lse ", lse.str(),
               " must be float32");
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

// Packed panels of the key blocks [kb * 128, kb * 128 + 128) of one (sequence, kv head), made the
// first time a block is needed and reused by every query block after (the packs are the size of
// K and V themselves); when they do not fit the scratch, one slot repacked per use.
template <class T>
struct KeyPanels {
  T* data = nullptr;
  int64_t per_block = 0, blocks = 0;
  bool cached = false;   // else one slot, repacked per use
  bool* made = nullptr;  // per block, when cached
  void reset() {
    if (cached) std::fill_n(made, blocks, false);
  }
  template <class Pack>
  const T* get(int64_t kb, Pack&& pack) {
    if (!cached) {
      pack(data);
      return data;
    }
    T* p = data + kb * per_block;
    if (!made[kb]) {
      pack(p);
      made[kb] = true;
    }
    return p;
  }
};

// Room for `kinds` caches of nkb blocks of per_block elements each, cached if `budget` allows;
// empty (reset) ones.
template <class T>
std::vector<KeyPanels<T>> key_panels(Arena& arena, int64_t nkb, std::vector<int64_t> per_block,
                                     int64_t budget) {
  int64_t all = 0;
  for (int64_t n : per_block) all += round_up(nkb * n * int64_t(sizeof(T)), 64) + round_up(nkb, 64);
  const bool cache = all <= budget;
  std::vector<KeyPanels<T>> out;
  for (int64_t n : per_block) {
    KeyPanels<T> k;
    k.per_block = n;
    k.blocks = nkb;
    k.cached = cache;
    k.data = arena.take<T>(cache ? nkb * n : n);
    if (cache) k.made = arena.take<bool>(nkb);
    if (arena.p) k.reset();
    out.push_back(k);
  }
  return out;
}

// Key j of a block starting at key j0 is visible from query i iff lo < j <= hi (causal and
// window, as offsets into the block) and it is in the query's segment. Branch-free, on 32-bit
// lanes, so that the loops over a row vectorise.
struct RowMask {
  int32_t lo, hi;
  RowMask(int64_t i, int64_t j0, int64_t window)
      : lo(window > 0 ? int32_t(std::max<int64_t>(i - window - j0, -1)) : -1),
        hi(int32_t(std::min<int64_t>(i - j0, kKeyBlock))) {}
  GEMMAX_SIMD_BODY bool visible(int32_t j, const int32_t* key_seg, int32_t query_seg) const {
    return (j > lo) & (j <= hi) & (key_seg[j] == query_seg);
  }
};

// Masks one row of scores over keys [j0, j0 + nk) for query i (causal, window, segment):
// hidden scores become -inf. Returns the row's largest score.
GEMMAX_SIMD_BODY float mask_row(float* s, int64_t nk, int64_t i, int64_t j0, int64_t window,
                                const int32_t* key_seg, int32_t query_seg) {
  const RowMask mask(i, j0, window);
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int32_t j = 0; j < int32_t(nk); ++j) {
    const float v = mask.visible(j, key_seg, query_seg) ? s[j] : -INFINITY;
    s[j] = v;
    mx = mx > v ? mx : v;
  }
  return mx;
}

// round_scores: the rows' scores rounded to T.
template <class T>
void round_scores(float* const* srows, int64_t rows, int64_t nk) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < nk; ++j) srows[r][j] = to_f32(from_f32<T>(srows[r][j]));
}

// p = exp(s - m) in T; returns the sum of the unrounded exponentials.
template <class T>
GEMMAX_SIMD_BODY float exp_row(T* p, const float* s, int64_t nk, float m) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < nk; ++j) {
    const float e = exp_approx(s[j] - m);
    p[j] = from_f32<T>(e);
    sum += e;
  }
  return sum;
}

// The backward's row: p = exp(s - lse) on visible keys (0 elsewhere), ds = p (dp - delta).
template <class T>
GEMMAX_SIMD_BODY void grad_row(T* p, T* ds, const float* s, const float* dp, int64_t nk, int64_t i,
                               int64_t j0, int64_t window, const int32_t* key_seg,
                               int32_t query_seg, float lse, float delta) {
  const RowMask mask(i, j0, window);
#pragma omp simd
  for (int32_t j = 0; j < int32_t(nk); ++j) {
    const float pv = mask.visible(j, key_seg, query_seg) ? exp_approx(s[j] - lse) : 0.0f;
    p[j] = from_f32<T>(pv);
    ds[j] = from_f32<T>(pv * (dp[j] - delta));
  }
}

// The softmax of one row of a key block: mask, running max, exponentials; returns the
// exponentials' sum (0 with nothing visible yet; m stays -inf then).
template <class T>
GEMMAX_SIMD_BODY float softmax_row(T* p, float* s, float* acc, float& m, int64_t nk, int64_t hd,
                                   int64_t i, int64_t j0, int64_t window, const int32_t* key_seg,
                                   int32_t query_seg, float& alpha) {
  const float mx = mask_row(s, nk, i, j0, window, key_seg, query_seg);
  const float m_new = std::max(m, mx);
  alpha = 1.0f;
  if (m_new == -INFINITY) {
    for (int64_t j = 0; j < nk; ++j) p[j] = T{};
    return 0.0f;
  }
  alpha = exp_approx(m - m_new);
  const float sum = exp_row(p, s, nk, m_new);
  m = m_new;
  if (alpha != 1.0f) {
#pragma omp simd
    for (int64_t c = 0; c < hd; ++c) acc[c] *= alpha;
  }
  return sum;
}

template <class T>
GEMMAX_AVX512 float softmax_row_avx512(T* p, float* s, float* acc, float& m, int64_t nk, int64_t hd,
                                       int64_t i, int64_t j0, int64_t window,
                                       const int32_t* key_seg, int32_t query_seg, float& alpha) {
  return softmax_row(p, s, acc, m, nk, hd, i, j0, window, key_seg, query_seg, alpha);
}

template <class T>
GEMMAX_AVX512 void grad_row_avx512(T* p, T* ds, const float* s, const float* dp, int64_t nk,
                                   int64_t i, int64_t j0, int64_t window, const int32_t* key_seg,
                                   int32_t query_seg, float lse, float delta) {
  grad_row(p, ds, s, dp, nk, i, j0, window, key_seg, query_seg, lse, delta);
}

// The first query block of each of `parts` runs of consecutive blocks, and nqb after the last:
// runs of about equal work (a block's work: its rows times the keys its last row sees, causal
// and windowed), each boundary the one nearest its share.
std::vector<int64_t> balanced_runs(const Geometry& g, int64_t nqb, int64_t parts) {
  std::vector<double> upto(size_t(nqb) + 1, 0.0);
  for (int64_t qb = 0; qb < nqb; ++qb) {
    const int64_t i0 = qb * g.bq, i1 = std::min(g.S, i0 + g.bq);
    upto[size_t(qb) + 1] = upto[size_t(qb)] + double(i1 - i0) * double(i1 - g.first_key(i0));
  }
  std::vector<int64_t> starts(size_t(parts) + 1, nqb);
  starts[0] = 0;
  for (int64_t p = 1; p < parts; ++p) {
    const double share = upto.back() * double(p) / double(parts);
    int64_t at = std::lower_bound(upto.begin(), upto.end(), share) - upto.begin();
    if (at > 0 && share - upto[size_t(at) - 1] < upto[size_t(at)] - share) --at;
    starts[size_t(p)] = std::max(starts[size_t(p) - 1], at);
  }
  return starts;
}

template <class T>
void forward(Isa isa, const Geometry& g, const T* q, const T* k, const T* v, const int32_t* seg,
             T* o, float* lse, const std::vector<void*>& scratch, int64_t scratch_bytes) {
  const GemmKernels<T>& K = kernels<T>(isa);
  const bool avx512 = wide_vectors(isa);
  constexpr int64_t P = kPair<T>;
  const int64_t nqb = (g.S + g.bq - 1) / g.bq, nkb = (g.S + kKeyBlock - 1) / kKeyBlock;
  if (g.B * g.KV == 0 || nqb == 0) return;
  const int64_t kt_elems = packed_elems(K, g.hd);      // one K^T panel: 32 keys
  const int64_t v_elems = packed_elems(K, kKeyBlock);  // one V panel: 32 columns
  const int64_t hd_panels = (g.hd + kPanelCols - 1) / kPanelCols;
  // Each (sequence, kv head) in enough runs of query blocks of equal work to keep every thread
  // busy; a run packs the key blocks it needs once.
  const int64_t parts =
      std::min<int64_t>(nqb, (2 * int64_t(scratch.size()) + g.B * g.KV - 1) / (g.B * g.KV));
  const std::vector<int64_t> runs = balanced_runs(g, nqb, parts);
  const int64_t tasks = g.B * g.KV * parts;
  const int64_t max_rows = g.bq * g.G;
  // One thread per scratch: the team is the backend's, whatever the process's OpenMP setting.
#pragma omp parallel for schedule(dynamic) num_threads(int(scratch.size()))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / (g.KV * parts), kvh = (task / parts) % g.KV, part = task % parts;
    Arena arena{static_cast<char*>(scratch[size_t(omp_get_thread_num())]), scratch_bytes};
    float* s = arena.take<float>(max_rows * kKeyBlock);
    T* p = arena.take<T>(max_rows * kKeyBlock);
    float* acc = arena.take<float>(max_rows * g.hd);
    float* m = arena.take<float>(max_rows);
    float* l = arena.take<float>(max_rows);
    const T** qrows = arena.take<const T*>(max_rows);
    const T** prows = arena.take<const T*>(max_rows);
    float** srows = arena.take<float*>(max_rows);
    float** arows = arena.take<float*>(max_rows);
    std::vector<KeyPanels<T>> packs =
        key_panels<T>(arena, nkb, {kKeyPanels * kt_elems, hd_panels * v_elems}, arena.left);
    for (int64_t r = 0; r < max_rows; ++r) {
      prows[r] = p + r * kKeyBlock;
      srows[r] = s + r * kKeyBlock;
      arows[r] = acc + r * g.hd;
    }
    const int32_t* sseg = seg + b * g.S;
    for (int64_t qb = runs[size_t(part)]; qb < runs[size_t(part) + 1]; ++qb) {
      const int64_t i0 = qb * g.bq, i1 = std::min(g.S, i0 + g.bq), rows = (i1 - i0) * g.G;
      block_rows(q, g, b, kvh, i0, rows, qrows);
      std::fill_n(m, rows, -INFINITY);
      std::fill_n(l, rows, 0.0f);
      std::fill_n(acc, rows * g.hd, 0.0f);
      for (int64_t kb = g.first_key(i0) / kKeyBlock; kb * kKeyBlock < i1; ++kb) {
        const int64_t j0 = kb * kKeyBlock, j1 = std::min(i1, j0 + kKeyBlock), nk = j1 - j0;
        const int64_t jend = std::min(g.S, j0 + kKeyBlock);  // the packed block's keys
        const T* kt = packs[0].get(
            kb, [&](T* dst) { pack_keys(K, dst, kt_elems, k, g, b, kvh, j0, jend, true); });
        serial_product(K, rows, qrows, P, kt, kt_elems, g.hd, nk, srows, false);
        if (g.round_scores) round_scores<T>(srows, rows, nk);
        for (int64_t r = 0; r < rows; ++r) {  // masked online softmax of the row
          const int64_t i = i0 + r / g.G;
          float alpha = 1.0f;
          const float sum =
              avx512 ? softmax_row_avx512(p + r * kKeyBlock, srows[r], arows[r], m[r], nk, g.hd, i,
                                          j0, g.W, sseg + j0, sseg[i], alpha)
                     : softmax_row(p + r * kKeyBlock, srows[r], arows[r], m[r], nk, g.hd, i, j0,
                                   g.W, sseg + j0, sseg[i], alpha);
          l[r] = l[r] * alpha + sum;
        }
        const T* vp = packs[1].get(
            kb, [&](T* dst) { pack_keys(K, dst, v_elems, v, g, b, kvh, j0, jend, false); });
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
}

// The backward's blocks in one thread's scratch (a dry run's arena lays them out with no
// memory, to learn `chunk`).
template <class T>
struct BackwardBlocks {
  T *tn, *at, *p, *ds;  // a panel of dO or Q over the rows; P^T or dS^T packed; P and dS rows
  float *s, *dp, *dqacc, *delta;
  int32_t* rowmap;
  const T **qrows, **dorows, **prows, **dsrows, **arow;
  float **srows, **dprows, **dqrows, **crow;
  std::vector<KeyPanels<T>> packs;  // K^T (scores), V^T (dP = dO . V^T), K (dQ = dS . K)
  int64_t chunk;                    // keys whose fp32 dK and dV fit beside the rest
  float *dkacc, *dvacc;

  BackwardBlocks(Arena& arena, const GemmKernels<T>& K, const Geometry& g) {
    constexpr int64_t P = kPair<T>;
    const int64_t max_rows = g.bq * g.G, rows_pad = round_up(max_rows, P);
    const int64_t kt_elems = packed_elems(K, g.hd), kp_elems = packed_elems(K, kKeyBlock);
    const int64_t hd_panels = (g.hd + kPanelCols - 1) / kPanelCols;
    tn = arena.take<T>(packed_elems(K, rows_pad));
    at = arena.take<T>(rows_pad * kKeyBlock);
    s = arena.take<float>(max_rows * kKeyBlock);
    dp = arena.take<float>(max_rows * kKeyBlock);
    p = arena.take<T>(max_rows * kKeyBlock);
    ds = arena.take<T>(max_rows * kKeyBlock);
    dqacc = arena.take<float>(max_rows * g.hd);
    delta = arena.take<float>(g.S * g.G);
    rowmap = arena.take<int32_t>(max_rows);
    qrows = arena.take<const T*>(max_rows);
    dorows = arena.take<const T*>(max_rows);
    prows = arena.take<const T*>(max_rows);
    dsrows = arena.take<const T*>(max_rows);
    srows = arena.take<float*>(max_rows);
    dprows = arena.take<float*>(max_rows);
    dqrows = arena.take<float*>(max_rows);
    arow = arena.take<const T*>(kTileRows);
    crow = arena.take<float*>(kTileRows);
    // The key blocks' panels are cached if there is room beside fp32 dK and dV for the whole
    // sequence; what is left holds dK and dV of a chunk of keys (the whole sequence when it
    // fits).
    const int64_t nkb = (g.S + kKeyBlock - 1) / kKeyBlock;
    const int64_t key_bytes = 2 * g.hd * int64_t(sizeof(float));  // a key's dK and dV rows
    packs = key_panels<T>(arena, nkb,
                          {kKeyPanels * kt_elems, kKeyPanels * kt_elems, hd_panels * kp_elems},
                          arena.left - (g.S * key_bytes + 128));
    const int64_t room = (arena.left - 128) / key_bytes;
    chunk = room >= g.S ? g.S : std::max<int64_t>(kKeyBlock, room / kKeyBlock * kKeyBlock);
    dkacc = arena.take<float>(chunk * g.hd);
    dvacc = arena.take<float>(chunk * g.hd);
    if (!arena.p) return;
    for (int64_t r = 0; r < max_rows; ++r) {
      rowmap[r] = int32_t((r / g.G) * g.H + r % g.G);
      prows[r] = p + r * kKeyBlock;
      dsrows[r] = ds + r * kKeyBlock;
      srows[r] = s + r * kKeyBlock;
      dprows[r] = dp + r * kKeyBlock;
      dqrows[r] = dqacc + r * g.hd;
    }
  }
};

template <class T>
void backward(Isa isa, const Geometry& g, const T* q, const T* k, const T* v, const T* o,
              const T* dout, const float* lse, const int32_t* seg, T* dq, T* dk, T* dv,
              const std::vector<void*>& scratch, int64_t scratch_bytes) {
  const GemmKernels<T>& K = kernels<T>(isa);
  const bool avx512 = wide_vectors(isa);
  constexpr int64_t P = kPair<T>;
  const int64_t nqb = (g.S + g.bq - 1) / g.bq, groups = g.B * g.KV;
  if (groups == 0 || nqb == 0) return;
  const int64_t kt_elems = packed_elems(K, g.hd);
  const int64_t kp_elems = packed_elems(K, kKeyBlock);
  Arena dry{nullptr, scratch_bytes};
  const bool whole_fits = BackwardBlocks<T>(dry, K, g).chunk == g.S;
  std::vector<float*> part_dk(scratch.size()), part_dv(scratch.size());
  // dK and dV of keys [j0, j1) of one (sequence, kv head): the sum, in their order, of `count`
  // fp32 accumulators whose row 0 is key `first`.
  auto store_kv = [&](int64_t b, int64_t kvh, int64_t j0, int64_t j1, const float* const* dks,
                      const float* const* dvs, int64_t count, int64_t first) {
    for (int64_t j = j0; j < j1; ++j) {
      T* krow = dk + ((b * g.S + j) * g.KV + kvh) * g.hd;
      T* vrow = dv + ((b * g.S + j) * g.KV + kvh) * g.hd;
      const int64_t at = (j - first) * g.hd;
      for (int64_t c = 0; c < g.hd; ++c) {
        float sk = dks[0][at + c], sv = dvs[0][at + c];
        for (int64_t p = 1; p < count; ++p) {
          sk += dks[p][at + c];
          sv += dvs[p][at + c];
        }
        krow[c] = from_f32<T>(sk);
        vrow[c] = from_f32<T>(sv);
      }
    }
  };

  // One (sequence, kv head) over the query blocks [qb0, qb1): writes their dQ, and dK and dV
  // unless `partial`, when its fp32 dK and dV sums stay in the thread's scratch for the caller.
  auto group = [&](int64_t b, int64_t kvh, int64_t qb0, int64_t qb1, bool partial) {
    const int thread = omp_get_thread_num();
    Arena arena{static_cast<char*>(scratch[size_t(thread)]), scratch_bytes};
    BackwardBlocks<T> x(arena, K, g);
    // delta_i = dO_i . O_i per query row.
    for (int64_t i = qb0 * g.bq; i < std::min(g.S, qb1 * g.bq); ++i)
      for (int64_t hh = 0; hh < g.G; ++hh) {
        const int64_t off = ((b * g.S + i) * g.H + kvh * g.G + hh) * g.hd;
        float d = 0;
#pragma omp simd reduction(+ : d)
        for (int64_t c = 0; c < g.hd; ++c) d += to_f32(dout[off + c]) * to_f32(o[off + c]);
        x.delta[i * g.G + hh] = d;
      }
    const int32_t* sseg = seg + b * g.S;
    const bool chunked = x.chunk < g.S;
    GEMMAX_CHECK(!(chunked && partial), "attention backward: partial sums need the whole sequence");
    if (chunked)  // dQ adds up over the chunks
      for (int64_t i = 0; i < g.S; ++i)
        std::fill_n(dq + ((b * g.S + i) * g.H + kvh * g.G) * g.hd, g.G * g.hd, T{});
    for (int64_t c0 = 0; c0 < g.S; c0 += x.chunk) {
      const int64_t c1 = std::min(g.S, c0 + x.chunk);
      std::fill_n(x.dkacc, (c1 - c0) * g.hd, 0.0f);
      std::fill_n(x.dvacc, (c1 - c0) * g.hd, 0.0f);
      for (int64_t qb = qb0; qb < qb1; ++qb) {
        const int64_t i0 = qb * g.bq, i1 = std::min(g.S, i0 + g.bq), rows = (i1 - i0) * g.G;
        const int64_t lo = std::max(c0, g.first_key(i0)), hi = std::min(c1, i1);
        if (lo >= hi) continue;
        block_rows(q, g, b, kvh, i0, rows, x.qrows);
        block_rows(dout, g, b, kvh, i0, rows, x.dorows);
        const Rows<const T> q_rows{q + ((b * g.S + i0) * g.H + kvh * g.G) * g.hd, g.hd, x.rowmap};
        const Rows<const T> do_rows{dout + ((b * g.S + i0) * g.H + kvh * g.G) * g.hd, g.hd,
                                    x.rowmap};
        std::fill_n(x.dqacc, rows * g.hd, 0.0f);
        for (int64_t kb = lo / kKeyBlock; kb * kKeyBlock < hi; ++kb) {
          const int64_t j0 = kb * kKeyBlock, j1 = std::min(hi, j0 + kKeyBlock), nk = j1 - j0;
          const int64_t jend = std::min(g.S, j0 + kKeyBlock);  // the packed block's keys
          const T* kt = x.packs[0].get(
              kb, [&](T* dst) { pack_keys(K, dst, kt_elems, k, g, b, kvh, j0, jend, true); });
          const T* vt = x.packs[1].get(
              kb, [&](T* dst) { pack_keys(K, dst, kt_elems, v, g, b, kvh, j0, jend, true); });
          serial_product(K, rows, x.qrows, P, kt, kt_elems, g.hd, nk, x.srows, false);
          if (g.round_scores) round_scores<T>(x.srows, rows, nk);
          serial_product(K, rows, x.dorows, P, vt, kt_elems, g.hd, nk, x.dprows, false);
          for (int64_t r = 0; r < rows; ++r) {  // P = exp(S - lse), dS = P (dP - delta)
            const int64_t i = i0 + r / g.G, h = kvh * g.G + r % g.G;
            const float lse_r = lse[(b * g.H + h) * g.S + i], dl = x.delta[i * g.G + r % g.G];
            if (avx512)
              grad_row_avx512(x.p + r * kKeyBlock, x.ds + r * kKeyBlock, x.srows[r], x.dprows[r],
                              nk, i, j0, g.W, sseg + j0, sseg[i], lse_r, dl);
            else
              grad_row(x.p + r * kKeyBlock, x.ds + r * kKeyBlock, x.srows[r], x.dprows[r], nk, i,
                       j0, g.W, sseg + j0, sseg[i], lse_r, dl);
          }
          // dV[j] += sum_r P[r][j] dO[r];  dK[j] += sum_r dS[r][j] Q[r]: reduced over rows.
          const int64_t mc_pad = round_up(rows, P);
          for (int pass = 0; pass < 2; ++pass) {
            const Rows<const T> a{pass == 0 ? x.p : x.ds, kKeyBlock};
            const Rows<const T>& rows_x = pass == 0 ? do_rows : q_rows;
            float* accum = (pass == 0 ? x.dvacc : x.dkacc) + (j0 - c0) * g.hd;
            K.pack_at(x.at, a, 0, rows, 0, nk);
            for (int64_t c = 0; c < g.hd; c += kPanelCols) {
              const int64_t nj = std::min<int64_t>(kPanelCols, g.hd - c);
              pack_rows_panel(K, x.tn, rows_x, 0, rows, c, nj);
              for (int64_t t0 = 0; t0 < nk; t0 += kTileRows) {
                const int tr = int(std::min<int64_t>(kTileRows, nk - t0));
                for (int t = 0; t < tr; ++t) {
                  x.arow[t] = x.at + (t0 + t) * P;
                  x.crow[t] = accum + (t0 + t) * g.hd + c;
                }
                K.tile_to_f32(tr, x.arow, nk * P, x.tn, mc_pad, x.crow, nj, true);
              }
            }
          }
          // dQ += dS . K
          const T* kp = x.packs[2].get(
              kb, [&](T* dst) { pack_keys(K, dst, kp_elems, k, g, b, kvh, j0, jend, false); });
          serial_product(K, rows, x.dsrows, P, kp, kp_elems, nk, g.hd, x.dqrows, true);
        }
        for (int64_t r = 0; r < rows; ++r) {
          T* out = dq + ((b * g.S + i0 + r / g.G) * g.H + kvh * g.G + r % g.G) * g.hd;
          for (int64_t c = 0; c < g.hd; ++c)
            out[c] = from_f32<T>(chunked ? to_f32(out[c]) + x.dqrows[r][c] : x.dqrows[r][c]);
        }
      }
      if (partial) {
        part_dk[size_t(thread)] = x.dkacc;
        part_dv[size_t(thread)] = x.dvacc;
        continue;
      }
      store_kv(b, kvh, c0, c1, &x.dkacc, &x.dvacc, 1, c0);
    }
  };

#pragma omp parallel num_threads(int(scratch.size()))
  {
    // Fewer (sequence, kv head) groups than threads: each group's query blocks are dealt to
    // `parts` threads in runs of equal work, each summing its dK and dV over the whole sequence
    // in its own scratch; then each thread adds the parts' sums, in part order, for a slice of
    // the keys. Otherwise (or when those sums do not fit) a thread takes whole groups.
    const int threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int64_t parts =
        groups < threads && whole_fits ? std::min<int64_t>(nqb, threads / groups) : 1;
    if (parts <= 1) {
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < groups; ++task) group(task / g.KV, task % g.KV, 0, nqb, false);
    } else {
      const std::vector<int64_t> runs = balanced_runs(g, nqb, parts);
      const int64_t gi = thread / parts, part = thread % parts, b = gi / g.KV, kvh = gi % g.KV;
      const bool works = gi < groups;
      if (works) group(b, kvh, runs[size_t(part)], runs[size_t(part) + 1], true);
#pragma omp barrier
      if (works)
        store_kv(b, kvh, g.S * part / parts, g.S * (part + 1) / parts, &part_dk[size_t(gi * parts)],
                 &part_dv[size_t(gi * parts)], parts, 0);
    }
  }
}

}  // namespace

void CpuBackend::do_attention_forward(const AttentionForwardArgs& args, NoDims) {
  const auto& [o, lse, q, k, v, segment_ids, shape] = args;
  if (is_wide(q)) return reference_.do_attention_forward(args, {});
  check(lse);
  const Geometry g(shape);
  dispatch<float, bf16>(q, "attention_forward", [&]<class T>() {
    // MaxText's softmax in bf16 needs each row's max before its first exponential: plain rows,
    // accumulated in fp32 as XLA does, instead of the blocks' online softmax.
    if (shape.round_softmax) return ref::attention_forward_rounded_softmax<T, float>(args);
    forward<T>(isa_, g, q.data<T>(), k.data<T>(), v.data<T>(), segment_ids.data<int32_t>(),
               o.data<T>(), lse.data<float>(), attention_scratch_, attention_scratch_bytes_);
  });
}

void CpuBackend::do_attention_backward(const AttentionBackwardArgs& args, NoDims) {
  const auto& [dq, dk, dv, dout, q, k, v, o, lse, segment_ids, shape] = args;
  if (is_wide(q)) return reference_.do_attention_backward(args, {});
  check(lse);
  const Geometry g(shape);
  dispatch<float, bf16>(q, "attention_backward", [&]<class T>() {
    if (shape.round_softmax) return ref::attention_backward_rounded_softmax<T, float>(args);
    backward<T>(isa_, g, q.data<T>(), k.data<T>(), v.data<T>(), o.data<T>(), dout.data<T>(),
                lse.data<float>(), segment_ids.data<int32_t>(), dq.data<T>(), dk.data<T>(),
                dv.data<T>(), attention_scratch_, attention_scratch_bytes_);
  });
}

void CpuBackend::do_attention_decode(const AttentionDecodeArgs& args, NoDims) {
  reference_.do_attention_decode(args, {});
}

}  // namespace gemmax

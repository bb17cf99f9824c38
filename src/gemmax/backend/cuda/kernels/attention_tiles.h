// The tile arithmetic every attention kernel shares: which keys a query sees, which tiles hold
// any visible pair (the rest are skipped), and the online softmax.
#pragma once

#include "gemmax/backend/cuda/kernels/kernel_base.h"

namespace gemmax::kern {

struct AttnDims {
  int64_t B, S, H, KV, hd;
  int64_t window;  // 0: none; else key j is visible from query i iff i - window < j <= i
  bool round_scores = false;  // each score rounded to the activation dtype (AttentionShape)
  GEMMAX_HD int64_t group() const { return H / KV; }
};

// Causal and window mask by index (the segment mask is checked per pair).
GEMMAX_HD bool causal_visible(int64_t i, int64_t j, int64_t window) {
  return j <= i && (window == 0 || j > i - window);
}
GEMMAX_HD int64_t first_visible_key(int64_t i, int64_t window) {
  return window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
}
GEMMAX_HD int64_t last_visible_query(int64_t j, int64_t S, int64_t window) {
  return window > 0 && j + window - 1 < S - 1 ? j + window - 1 : S - 1;
}

// Tiles [begin, end) of size `tile` along the keys that queries [q0, q1) may see.
struct TileRange {
  int64_t begin, end;
};
GEMMAX_HD TileRange key_tiles(int64_t q0, int64_t q1, int64_t window, int64_t tile) {
  if (q1 <= q0) return {0, 0};
  return {first_visible_key(q0, window) / tile, (q1 - 1) / tile + 1};
}

// Interior tiles: most tiles of a long sequence hold only visible pairs, and skip the mask (its
// int64 causal, window and segment tests are about half of a tile's instructions). A warp's own
// rows (or keys) span positions [lo, hi] of one segment `seg`; `uniform` is false when they do
// not (two segments, or past the sequence), and then every tile is masked. Positions are held in
// 32 bits (a sequence is shorter than 2^31): the forward kernel runs at its register limit.
struct WarpSpan {
  int32_t lo, hi;
  int32_t seg;
  bool uniform;
};
template <class X>
GEMMAX_KFN WarpSpan warp_span(X& x, const int64_t (&pos)[2], const int32_t (&segs)[2], int64_t S) {
  int32_t lo = int32_t(kmin(pos[0], pos[1])), hi = int32_t(kmin<int64_t>(kmax(pos[0], pos[1]), S));
  for (int m = 16; m > 0; m >>= 1) {
    lo = kmin(lo, x.shfl_xor(lo, m));
    hi = kmax(hi, x.shfl_xor(hi, m));
  }
  const int32_t s0 = x.shfl(segs[0], 0);
  const bool same = x.ballot(segs[0] == s0 && segs[1] == s0) == 0xffffffffu;
  return {lo, hi, s0, same && hi < S};
}
// Whether all n entries of `segs` (shared memory) are `seg`, for the whole warp.
template <class X>
GEMMAX_KFN bool warp_all_in_segment(X& x, const int32_t* segs, int n, int32_t seg) {
  bool same = true;
  for (int c = x.lane(); c < n; c += kWarp) same = same && segs[c] == seg;
  return x.ballot(same) == 0xffffffffu;
}
// Rows w and keys [k0, k0 + n): every key in the sequence, at or before the first row, inside
// the window of the last row, in the rows' segment (segk: the keys' segments).
template <class X>
GEMMAX_KFN bool interior_keys(X& x, const WarpSpan& w, int64_t k0, int n, const int32_t* segk,
                              int64_t S, int64_t window) {
  if (!w.uniform || k0 + n > S || k0 + n - 1 > w.lo || (window > 0 && k0 <= w.hi - window))
    return false;  // the same on every lane: the warp leaves together
  return warp_all_in_segment(x, segk, n, w.seg);
}
// Keys w and queries [q0, q0 + n): every query in the sequence, at or after the last key, inside
// the window of the first key, in the keys' segment (segq: the queries' segments).
template <class X>
GEMMAX_KFN bool interior_queries(X& x, const WarpSpan& w, int64_t q0, int n, const int32_t* segq,
                                 int64_t S, int64_t window) {
  if (!w.uniform || q0 + n > S || w.hi > q0 || (window > 0 && w.lo <= q0 + n - 1 - window))
    return false;
  return warp_all_in_segment(x, segq, n, w.seg);
}

// The running max and sum of one query row. add_tile(tile_max) moves the max and returns the
// factor that scales what was accumulated before (0 the first time); p(s) is the weight of a
// score under the current max (0 for a masked score, kNegInf).
struct OnlineSoftmax {
  float max = kNegInf, sum = 0;
  GEMMAX_HD float add_tile(float tile_max) {
    const float m = kmax(max, tile_max);
    const float f = max == kNegInf ? 0.0f : kexp(max - m);
    sum *= f;
    max = m;
    return f;
  }
  GEMMAX_HD float p(float s) const { return s == kNegInf ? 0.0f : kexp(s - max); }
  GEMMAX_HD float lse() const { return max + klog(sum); }
  // Merges another partial state of the same row (its accumulators scaled by the returned
  // factors: this one's by *self, other's by *others).
  GEMMAX_HD void merge(const OnlineSoftmax& o, float* self, float* other) {
    const float m = kmax(max, o.max);
    *self = max == kNegInf ? 0.0f : kexp(max - m);
    *other = o.max == kNegInf ? 0.0f : kexp(o.max - m);
    sum = sum * *self + o.sum * *other;
    max = m;
  }
};

}  // namespace gemmax::kern

// Stable sort of items by a small integer key (bins <= kMaxBins): the sort of token copies by
// expert, and the passes of the radix sort of tokens by id (embedding backward).
//
// Three launches: every chunk of kSortChunk items counts its keys; one block turns the counts
// into each chunk's first output slot per key (keys in order, chunks in order within a key);
// every chunk then writes its items in order, ranking equal keys within a warp by match_any
// and across the warps of a round by their counts. Equal keys keep their input order.
#pragma once

#include "gemmax/backend/cuda/kernels/elementwise.h"

namespace gemmax::kern {

constexpr int kSortThreads = 256, kSortChunk = 4096, kMaxBins = 512;

// Item i of a pass is position p = perm_in[i] (perm_in null: p = i); its key is keys[p], used
// directly (radix_shift < 0: a key outside [0, bins) is recorded as an error and sorted as 0) or
// as the digit (keys[p] >> radix_shift) mod bins (bins a power of two).
struct SortPass {
  const int32_t* keys;
  const int32_t* perm_in;
  int64_t n;
  int bins;
  int radix_shift;
  DeviceError* err;
  GEMMAX_HD int64_t item(int64_t i) const { return perm_in ? perm_in[i] : i; }
};

template <class X>
GEMMAX_KFN int sort_key(X& x, const SortPass& s, int64_t p) {
  const int32_t k = s.keys[p];
  if (s.radix_shift >= 0) return (k >> s.radix_shift) & (s.bins - 1);
  if (k >= 0 && k < s.bins) return k;
  record_error(x, s.err, DeviceError::kExpertOutOfRange, kOpRouteSort, k, p, s.bins);
  return 0;
}

// hist[chunk * bins + key] = count of the key in the chunk. Grid: chunks.
struct SortHistogramKernel {
  static constexpr int kMaxThreads = kSortThreads;
  template <class X>
  GEMMAX_KFN void operator()(X& x, SortPass s, int32_t* hist) const {
    int32_t* count = x.template smem<int32_t>();
    for (int k = x.tid(); k < s.bins; k += x.nthreads()) count[k] = 0;
    x.sync();
    const int64_t begin = int64_t(x.bx()) * kSortChunk, end = kmin(s.n, begin + kSortChunk);
    for (int64_t i = begin + x.tid(); i < end; i += x.nthreads())
      x.atomic_add(&count[sort_key(x, s, s.item(i))], 1);
    x.sync();
    for (int k = x.tid(); k < s.bins; k += x.nthreads())
      hist[int64_t(x.bx()) * s.bins + k] = count[k];
  }
};

// offsets[chunk * bins + key] = first output slot of the chunk's items with that key; totals[key]
// (if not null) = items with that key. One block.
struct SortOffsetsKernel {
  static constexpr int kMaxThreads = kSortThreads;
  template <class X>
  GEMMAX_KFN void operator()(X& x, const int32_t* hist, int chunks, int bins, int32_t* offsets,
                             int32_t* totals) const {
    int32_t* base = x.template smem<int32_t>();
    for (int k = x.tid(); k < bins; k += x.nthreads()) {
      int32_t t = 0;
      for (int c = 0; c < chunks; ++c) t += hist[int64_t(c) * bins + k];
      base[k] = t;
      if (totals) totals[k] = t;
    }
    x.sync();
    if (x.tid() == 0) {
      int32_t run = 0;
      for (int k = 0; k < bins; ++k) {
        const int32_t t = base[k];
        base[k] = run;
        run += t;
      }
    }
    x.sync();
    for (int k = x.tid(); k < bins; k += x.nthreads()) {
      int32_t run = base[k];
      for (int c = 0; c < chunks; ++c) {
        offsets[int64_t(c) * bins + k] = run;
        run += hist[int64_t(c) * bins + k];
      }
    }
  }
};

// perm_out[slot] = item position, stable. Grid: chunks. Shared memory: (1 + warps) * bins ints.
struct SortScatterKernel {
  static constexpr int kMaxThreads = kSortThreads;
  template <class X>
  GEMMAX_KFN void operator()(X& x, SortPass s, const int32_t* offsets, int32_t* perm_out) const {
    const int warps = x.nthreads() / kWarp, warp = x.tid() / kWarp, lane = x.lane();
    int32_t* next = x.template smem<int32_t>();  // [bins]: next free slot per key
    int32_t* wcount = next + s.bins;             // [warps][bins]: a round's count per warp
    for (int k = x.tid(); k < s.bins; k += x.nthreads()) {
      next[k] = offsets[int64_t(x.bx()) * s.bins + k];
      for (int w = 0; w < warps; ++w) wcount[w * s.bins + k] = 0;
    }
    x.sync();
    const int64_t begin = int64_t(x.bx()) * kSortChunk, end = kmin(s.n, begin + kSortChunk);
    for (int64_t round = begin; round < end; round += x.nthreads()) {
      const int64_t i = round + x.tid();
      const bool valid = i < end;
      const int64_t p = valid ? s.item(i) : -1;
      const int key = valid ? sort_key(x, s, p) : -1;
      const uint32_t peers = x.match_any(key);
      const uint32_t below = peers & ((1u << lane) - 1u);
      if (valid && below == 0) wcount[warp * s.bins + key] = kpopc(peers);
      x.sync();
      if (valid) {
        int32_t slot = next[key] + kpopc(below);
        for (int w = 0; w < warp; ++w) slot += wcount[w * s.bins + key];
        perm_out[slot] = int32_t(p);
      }
      x.sync();
      for (int k = x.tid(); k < s.bins; k += x.nthreads()) {
        int32_t add = 0;
        for (int w = 0; w < warps; ++w) {
          add += wcount[w * s.bins + k];
          wcount[w * s.bins + k] = 0;
        }
        next[k] += add;
      }
      x.sync();
    }
  }
};

// The routing maps from the sorted order: inverse[order[r]] = r, token[r] = order[r] / k.
struct RouteMapsKernel {
  static constexpr int kMaxThreads = 256;
  template <class X>
  GEMMAX_KFN void operator()(X& x, const int32_t* order, int64_t n, int64_t k, int32_t* inverse,
                             int32_t* token) const {
    GEMMAX_GRID_STRIDE(x, r, n) {
      inverse[order[r]] = int32_t(r);
      token[r] = int32_t(order[r] / k);
    }
  }
};

}  // namespace gemmax::kern

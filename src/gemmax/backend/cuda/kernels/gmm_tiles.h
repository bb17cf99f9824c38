// The grouped matmul's tile map, shared by its kernels: group sizes live on the device, so the
// grid is launched for the most row tiles any split of m rows into G groups can have
// (ceil(m / BM) + G) and every block finds its group from the sizes, in shared memory.
#pragma once

#include "gemmax/backend/cuda/kernels/elementwise.h"

namespace gemmax::kern {

// The operands of one grouped matmul (Backend::gmm, gmm_dlhs, gmm_drhs; GmmRows).
struct GmmArgs {
  const int32_t* group_sizes;
  int64_t G;
  int64_t m;                        // sorted rows
  const int32_t *in_map, *out_map;  // null: identity
  int64_t in_rows, out_rows;        // rows of the tensors the maps index
  int64_t k;                        // row length of the input side
  int64_t N, w0, n;                 // weight rows per group; the window [w0, w0 + n)
  bool accumulate;
  DeviceError* err;
  int32_t op;  // OpId, for errors
  // The group table in device memory (GroupTableKernel): first_row [G + 1], then first_tile
  // [G + 1]; null for the kernels that build it per block.
  const int32_t* table;
};

// In shared memory: first_row[g] and first_tile[g] for g in [0, G], one thread builds it.
struct GroupTiles {
  int32_t* first_row;
  int32_t* first_tile;
  int64_t G;

  static constexpr size_t smem_ints(int64_t G) { return size_t(2 * (G + 1)); }
  GEMMAX_HD void build(const int32_t* sizes, int64_t tile_rows) {
    first_row[0] = first_tile[0] = 0;
    for (int64_t g = 0; g < G; ++g) {
      const int32_t s = sizes[g] > 0 ? sizes[g] : 0;
      first_row[g + 1] = first_row[g] + s;
      first_tile[g + 1] = first_tile[g] + int32_t((s + tile_rows - 1) / tile_rows);
    }
  }
  // The group of row tile `tile` and the tile's first row and row count; false past the last.
  GEMMAX_HD bool locate(int64_t tile, int64_t tile_rows, int64_t* g, int64_t* row0,
                        int64_t* rows) const {
    if (tile >= first_tile[G]) return false;
    int64_t lo = 0, hi = G - 1;  // the last group whose first tile is <= tile
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (first_tile[mid] <= tile)
        lo = mid;
      else
        hi = mid - 1;
    }
    while (first_tile[lo + 1] == first_tile[lo]) ++lo;  // skip empty groups
    *g = lo;
    *row0 = first_row[lo] + (tile - first_tile[lo]) * tile_rows;
    *rows = kmin<int64_t>(tile_rows, first_row[lo + 1] - *row0);
    return true;
  }
};

GEMMAX_HD int64_t gmm_max_row_tiles(int64_t m, int64_t G, int64_t tile_rows) {
  return ceil_div(m, tile_rows) + G;
}

// Builds the group table in shared memory (thread 0), checks that the sizes add up to m (block 0
// records a mismatch) and publishes it to the block.
template <class X>
GEMMAX_KFN GroupTiles group_tiles(X& x, const GmmArgs& a, int32_t* smem, int64_t tile_rows) {
  GroupTiles t{smem, smem + a.G + 1, a.G};
  if (x.tid() == 0) {
    t.build(a.group_sizes, tile_rows);
    if (t.first_row[a.G] != a.m && x.bx() == 0 && x.by() == 0 && x.bz() == 0)
      record_error(x, a.err, DeviceError::kGroupSizes, a.op, t.first_row[a.G], a.m, 0);
  }
  x.sync();
  return t;
}

// The group table of a grouped matmul, once per op for all its blocks: a scan of the group
// sizes into `table` (first_row [G + 1], then first_tile [G + 1] of `tile_rows`). One block;
// thread t scans a run of consecutive groups, thread 0 the runs' totals, in a fixed order. A
// sum that is not m is recorded.
struct GroupTableKernel {
  static constexpr int kMaxThreads = 256;
  template <class X>
  GEMMAX_KFN void operator()(X& x, int32_t* table, const int32_t* sizes, int64_t G, int64_t m,
                             int64_t tile_rows, DeviceError* err, int32_t op) const {
    int32_t* rows = x.template smem<int32_t>();  // [threads + 1] each
    int32_t* tiles = rows + x.nthreads() + 1;
    const int64_t run = ceil_div(G, x.nthreads()), g0 = kmin<int64_t>(G, x.tid() * run),
                  g1 = kmin<int64_t>(G, g0 + run);
    int32_t r = 0, t = 0;
    for (int64_t g = g0; g < g1; ++g) {
      const int32_t s = sizes[g] > 0 ? sizes[g] : 0;
      r += s;
      t += int32_t((s + tile_rows - 1) / tile_rows);
    }
    rows[x.tid() + 1] = r;
    tiles[x.tid() + 1] = t;
    x.sync();
    if (x.tid() == 0) {
      rows[0] = tiles[0] = 0;
      for (int i = 1; i <= x.nthreads(); ++i) {
        rows[i] += rows[i - 1];
        tiles[i] += tiles[i - 1];
      }
      if (rows[x.nthreads()] != m)
        record_error(x, err, DeviceError::kGroupSizes, op, rows[x.nthreads()], m, 0);
    }
    x.sync();
    int32_t* first_row = table;
    int32_t* first_tile = table + G + 1;
    r = rows[x.tid()];
    t = tiles[x.tid()];
    if (x.tid() == 0) first_row[0] = first_tile[0] = 0;
    for (int64_t g = g0; g < g1; ++g) {
      const int32_t s = sizes[g] > 0 ? sizes[g] : 0;
      r += s;
      t += int32_t((s + tile_rows - 1) / tile_rows);
      first_row[g + 1] = r;
      first_tile[g + 1] = t;
    }
  }
  static constexpr size_t smem_bytes(int threads) { return size_t(2 * (threads + 1)) * 4; }
};

// The table GroupTableKernel wrote, as the blocks of the tensor-core kernels read it.
GEMMAX_HD GroupTiles device_group_tiles(const GmmArgs& a) {
  return GroupTiles{const_cast<int32_t*>(a.table), const_cast<int32_t*>(a.table) + a.G + 1, a.G};
}

// Row `r` of the sorted rows through a map, or -1 (recorded) when the entry is out of range.
template <class X>
GEMMAX_KFN int64_t mapped_row(X& x, const int32_t* map, int64_t r, int64_t limit,
                              const GmmArgs& a) {
  if (!map) return r < limit ? r : -1;
  const int64_t v = map[r];
  if (v >= 0 && v < limit) return v;
  record_error(x, a.err, DeviceError::kRowMap, a.op, v, r, limit);
  return -1;
}

}  // namespace gemmax::kern

#include "gemmax/backend/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "gemmax/backend/cpu/gemm_kernels.h"
#include "gemmax/base/error.h"

namespace gemmax::cpu {
namespace {

constexpr int64_t kSharedBytes = int64_t(4) << 20;  // packed B of one column chunk; A^T blocks
constexpr int64_t kRowBlocksPerUnit = 16;           // gemm: at most 224 rows of A per group
// gemm: a group's copy of A's rows stays within this (L2, beside the panel it multiplies). With
// 384 KiB gemma4-e2b's products ran at 0.90-0.99 of the vdpbf16ps peak on 2 threads of an AMD
// Zen 5, against 0.87-0.98 with groups of 224 rows whatever the reduction's length.
constexpr int64_t kAGroupBytes = int64_t(384) << 10;
// gemm copies A's rows only for a chunk of at least this many panels: with fewer, the copy is not
// repaid (a LoRA product's 16 columns: 400 GFLOP/s copied, 470 in place; 8 panels: even).
constexpr int64_t kCopyMinPanels = 8;
constexpr int64_t kThreadBytes = int64_t(2) << 20;  // per thread: packing of the serial forms
// gemm: a reduction longer than kLongReduction runs in slices of at most kReductionSlice, added
// into C in order. A packing round then holds many panels, so A's rows are read from memory a
// few times per slice rather than once per few panels of the whole reduction: 2048 x 1536
// outputs over k = 262144 (the head's dx) went from 0.66 to 0.85-0.88 TFLOP/s, k = 12288 from
// 0.80 to 0.87; k = 6144 is faster whole (0.86 against 0.82), hence the threshold.
constexpr int64_t kLongReduction = 8192;
constexpr int64_t kReductionSlice = 4096;
// gemm_tn: an fp32 C's reduction runs in pieces of this many rows; a group of C rows' packed
// A^T piece stays within kTnGroupBytes (L2, beside C's rows and one B panel piece).
constexpr int64_t kTnPieceRows = 1024;
constexpr int64_t kTnGroupBytes = int64_t(256) << 10;

template <class TC, class T>
auto tile_fn(const GemmKernels<T>& k) {
  if constexpr (std::is_same_v<TC, bf16>)
    return k.tile_to_bf16;
  else
    return k.tile_to_f32;
}

template <class TC>
void zero_rows(Rows<TC> c, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) std::fill_n(c(i), n, TC{});
}

// gemm_tn reduces its m rows in as few passes as its panels allow: a pass's B panel (mc rows x
// 32 columns) must fit `budget` bytes. One pass when it can: C is then read and written once.
template <class T>
int64_t reduction_chunk(const GemmKernels<T>& K, int64_t m, int64_t budget) {
  const int64_t row_bytes = kPanelCols * int64_t(sizeof(T)) * K.b_width;
  const int64_t rows = budget / row_bytes / kPair<T> * kPair<T>;
  return std::max<int64_t>(kPair<T>, std::min(m, rows));
}

// gemm copies each group of A's rows into its thread's scratch, this many elements apart: A's
// own rows are often a multiple of 4 KiB apart (2048, 6144, 12288 or 262144 bf16), so that the 14
// rows a tile reads fall in one set of the L1 and L2 caches and evict each other. The copy's
// rows are k rounded up to a cache line, plus one line. Made once per group and chunk of panels
// and read once per panel (kCopyMinPanels or more).
template <class T>
int64_t copied_row_elems(int64_t k) {
  constexpr int64_t line = 64 / int64_t(sizeof(T));
  return round_up(k, line) + line;
}

// Row blocks per group: the group's copy fits kAGroupBytes and the thread's scratch; 0 when not
// even one block fits the scratch (A is then read in place).
template <class T>
int64_t group_row_blocks(int64_t k, int64_t thread_bytes) {
  const int64_t block_bytes = kTileRows * copied_row_elems<T>(k) * int64_t(sizeof(T));
  if (block_bytes > thread_bytes) return 0;
  return std::clamp<int64_t>(std::min(kAGroupBytes, thread_bytes) / block_bytes, 1,
                             kRowBlocksPerUnit);
}

template <class T, class TC>
void check_tn_output(int64_t m, int64_t mc) {
  GEMMAX_CHECK((std::is_same_v<TC, float> || m <= mc), "gemm_tn: a bf16 output of a ", m,
               "-row reduction would be rounded once per ", mc, " rows; reduce into fp32");
}

// The contiguous share [begin, end) of `count` work units that thread `t` of `n` runs.
std::pair<int64_t, int64_t> share(int64_t count, int t, int n) {
  return {count * t / n, count * (t + 1) / n};
}

// gemm's units are (group of rows, panel), group-major, and a unit's work is its group's rows:
// the first unit of thread t of n is where the rows before it reach t/n of m x np (the nearest
// unit). Counting units instead gave a short last group the same share as a full one (2048
// rows: 9 groups of 224 and one of 32, a 5:4.1 split on 2 threads).
int64_t first_unit(int64_t m, int64_t group_rows, int64_t np, int t, int n) {
  const int64_t row_groups = (m + group_rows - 1) / group_rows;
  if (t >= n) return row_groups * np;
  const int64_t target = m * np * t / n;
  const int64_t g = target / (group_rows * np);
  const int64_t rows = std::min(group_rows, m - g * group_rows);
  const int64_t p = std::min(np, (target - g * group_rows * np + rows / 2) / rows);
  return g * np + p;
}

}  // namespace

int64_t packed_width(Isa isa) { return kernels<bf16>(isa).b_width; }
int64_t gemm_shared_bytes(Isa isa) { return kSharedBytes * packed_width(isa); }
int64_t gemm_thread_bytes(Isa isa) { return kThreadBytes * packed_width(isa); }

template <class T, class TC>
void gemm_in_slices(Isa isa, int64_t m, int64_t n, int64_t k, Rows<const T> a, BMatrix<T> b,
                    Rows<TC> c, bool accumulate, const GemmScratch& scratch);

template <class T, class TC>
void gemm(Isa isa, int64_t m, int64_t n, int64_t k, Rows<const T> a, BMatrix<T> b, Rows<TC> c,
          bool accumulate, const GemmScratch& scratch) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) zero_rows(c, m, n);
    return;
  }
  const GemmKernels<T>& K = kernels<T>(isa);
  const auto tile = tile_fn<TC>(K);
  const int64_t panel_elems = packed_elems(K, k);
  const int64_t panel_bytes = panel_elems * int64_t(sizeof(T));
  if (panel_bytes > scratch.shared_bytes || k > kLongReduction)
    return gemm_in_slices(isa, m, n, k, a, b, c, accumulate, scratch);
  const int64_t panels = (n + kPanelCols - 1) / kPanelCols;
  const int64_t chunk = std::max<int64_t>(1, scratch.shared_bytes / panel_bytes);
  const int64_t row_blocks = (m + kTileRows - 1) / kTileRows;
  const int64_t ld_copy = copied_row_elems<T>(k);
  const int64_t copy_blocks =
      scratch.thread.empty() ? 0 : group_row_blocks<T>(k, scratch.thread_bytes);
  const int64_t group_blocks = copy_blocks > 0 ? copy_blocks : kRowBlocksPerUnit;
  T* packed = static_cast<T*>(scratch.shared);
  for (int64_t pc0 = 0; pc0 < panels; pc0 += chunk) {
    const int64_t np = std::min(chunk, panels - pc0);
#pragma omp parallel
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const auto [p0, p1] = share(np, t, nt);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t j0 = (pc0 + p) * kPanelCols;
        K.pack_b(packed + p * panel_elems, b, 0, k, j0, std::min<int64_t>(kPanelCols, n - j0));
      }
#pragma omp barrier
      // Units: (group of row blocks, panel), group-major, so a thread's copy of A's rows stays in
      // cache while it walks the panels. A thread beyond the scratch's reads A in place.
      const int64_t group_rows = group_blocks * kTileRows;
      const int64_t u0 = first_unit(m, group_rows, np, t, nt);
      const int64_t u1 = first_unit(m, group_rows, np, t + 1, nt);
      const T* a_rows[kTileRows];
      TC* c_rows[kTileRows];
      T* a_copy = copy_blocks > 0 && np >= kCopyMinPanels && t < int(scratch.thread.size())
                      ? static_cast<T*>(scratch.thread[size_t(t)])
                      : nullptr;
      int64_t copied_group = -1;
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t g = u / np, p = u % np, j0 = (pc0 + p) * kPanelCols;
        const int64_t nj = std::min<int64_t>(kPanelCols, n - j0);
        const int64_t rb_end = std::min(row_blocks, (g + 1) * group_blocks);
        const int64_t g_row0 = g * group_blocks * kTileRows;
        if (a_copy && g != copied_group) {
          const int64_t g_rows = std::min(m, rb_end * kTileRows) - g_row0;
          for (int64_t i = 0; i < g_rows; ++i)
            std::memcpy(a_copy + i * ld_copy, a(g_row0 + i), size_t(k) * sizeof(T));
          copied_group = g;
        }
        for (int64_t rb = g * group_blocks; rb < rb_end; ++rb) {
          const int rows = int(std::min<int64_t>(kTileRows, m - rb * kTileRows));
          for (int r = 0; r < rows; ++r) {
            const int64_t i = rb * kTileRows + r;
            a_rows[r] = a_copy ? a_copy + (i - g_row0) * ld_copy : a(i);
            c_rows[r] = c(i) + j0;
          }
          tile(rows, a_rows, kPair<T>, packed + p * panel_elems, k, c_rows, nj, accumulate);
        }
      }
    }
  }
}

template <class T, class TC>
void gemm_tn(Isa isa, int64_t n, int64_t k, int64_t m, Rows<const T> a, Rows<const T> b, TC* c,
             int64_t ldc, bool accumulate, const GemmScratch& scratch) {
  if (n == 0 || k == 0) return;
  if (m == 0) {
    if (!accumulate) zero_rows(Rows<TC>{c, ldc}, n, k);
    return;
  }
  const GemmKernels<T>& K = kernels<T>(isa);
  const auto tile = tile_fn<TC>(K);
  constexpr int64_t P = kPair<T>;
  const int64_t panels = (k + kPanelCols - 1) / kPanelCols;
  // B is packed once per reduction chunk, all its panels side by side in the shared scratch.
  const int64_t chunk = reduction_chunk<T>(K, m, scratch.shared_bytes / panels);
  GEMMAX_CHECK(panels * packed_elems(K, chunk) * int64_t(sizeof(T)) <= scratch.shared_bytes,
               "gemm_tn: ", k, " columns of B do not fit the packing scratch");
  check_tn_output<T, TC>(m, chunk);
  GEMMAX_CHECK(int64_t(scratch.thread.size()) >= omp_get_max_threads(), "gemm_tn: scratch for ",
               scratch.thread.size(), " threads, running ", omp_get_max_threads());
  const int64_t row_tiles = (n + kTileRows - 1) / kTileRows;
  T* packed = static_cast<T*>(scratch.shared);
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    const int64_t mc = std::min(chunk, m - r0), mc_pad = round_up(mc, P);
    const bool acc = accumulate || r0 > 0;  // reduction chunks add up in order
    // A bf16 C is rounded once, so its reduction runs as one piece; an fp32 C takes it in
    // pieces of kTnPieceRows, each added into C, which stays in cache between them.
    const int64_t piece = std::is_same_v<TC, float> ? std::min(mc_pad, kTnPieceRows) : mc_pad;
    // Rows of C per group: the group's packed A^T piece fits kTnGroupBytes (and the scratch).
    const int64_t group_budget =
        std::min(kTnGroupBytes, scratch.thread_bytes) / (piece * int64_t(sizeof(T)));
    GEMMAX_CHECK(group_budget >= 1, "gemm_tn: a ", piece,
                 "-row reduction does not fit the packing scratch");
    const int64_t group_rows = std::max<int64_t>(1, group_budget / kTileRows) * kTileRows;
#pragma omp parallel
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const auto [q0, q1] = share(panels, t, nt);
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t k0 = q * kPanelCols;
        pack_rows_panel(K, packed + q * packed_elems(K, mc_pad), b, r0, mc, k0,
                        std::min<int64_t>(kPanelCols, k - k0));
      }
#pragma omp barrier
      // Each thread owns whole rows of C: tiles [t0, t1), walked in groups.
      const auto [t0, t1] = share(row_tiles, t, nt);
      const int64_t row_end = std::min(n, t1 * kTileRows);
      T* at = static_cast<T*>(scratch.thread[size_t(t)]);
      const T* a_rows[kTileRows];
      TC* c_rows[kTileRows];
      for (int64_t g0 = t0 * kTileRows; g0 < row_end; g0 += group_rows) {
        const int64_t nb = std::min(group_rows, row_end - g0);
        for (int64_t s0 = 0; s0 < mc; s0 += piece) {
          const int64_t sc = std::min(piece, mc - s0), sc_pad = round_up(sc, P);
          K.pack_at(at, a, r0 + s0, sc, g0, nb);  // A^T [sc_pad / P][nb][P]
          for (int64_t q = 0; q < panels; ++q) {
            const int64_t k0 = q * kPanelCols, nj = std::min<int64_t>(kPanelCols, k - k0);
            const T* panel = packed + q * packed_elems(K, mc_pad) + packed_elems(K, s0);
            for (int64_t i0 = 0; i0 < nb; i0 += kTileRows) {
              const int rows = int(std::min<int64_t>(kTileRows, nb - i0));
              for (int r = 0; r < rows; ++r) {
                a_rows[r] = at + (i0 + r) * P;
                c_rows[r] = c + (g0 + i0 + r) * ldc + k0;
              }
              tile(rows, a_rows, nb * P, panel, sc_pad, c_rows, nj, acc || s0 > 0);
            }
          }
        }
      }
#pragma omp barrier  // the next chunk repacks B
    }
  }
}

template <class T, class TC>
void gemm_serial(Isa isa, int64_t m, int64_t n, int64_t k, Rows<const T> a, BMatrix<T> b,
                 Rows<TC> c, bool accumulate, void* scratch, int64_t scratch_bytes) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) zero_rows(c, m, n);
    return;
  }
  const GemmKernels<T>& K = kernels<T>(isa);
  const int64_t panel_elems = packed_elems(K, k);
  const int64_t panel_bytes = panel_elems * int64_t(sizeof(T));
  GEMMAX_CHECK(panel_bytes <= scratch_bytes, "gemm: a reduction of ", k,
               " does not fit the packing scratch");
  const int64_t panels = (n + kPanelCols - 1) / kPanelCols;
  const int64_t chunk = std::max<int64_t>(1, scratch_bytes / panel_bytes);
  T* packed = static_cast<T*>(scratch);
  std::vector<const T*> a_rows(static_cast<size_t>(std::min(m, kTileRows * kRowBlocksPerUnit)));
  std::vector<TC*> c_rows(a_rows.size());
  for (int64_t pc0 = 0; pc0 < panels; pc0 += chunk) {
    const int64_t np = std::min(chunk, panels - pc0);
    for (int64_t p = 0; p < np; ++p) {
      const int64_t j0 = (pc0 + p) * kPanelCols;
      K.pack_b(packed + p * panel_elems, b, 0, k, j0, std::min<int64_t>(kPanelCols, n - j0));
    }
    // Rows in groups that stay in cache while the chunk's panels pass over them.
    for (int64_t r0 = 0; r0 < m; r0 += int64_t(a_rows.size())) {
      const int64_t rows = std::min(int64_t(a_rows.size()), m - r0);
      for (int64_t r = 0; r < rows; ++r) {
        a_rows[size_t(r)] = a(r0 + r);
        c_rows[size_t(r)] = c(r0 + r) + pc0 * kPanelCols;
      }
      serial_product(K, rows, a_rows.data(), kPair<T>, packed, panel_elems, k,
                     std::min(np * kPanelCols, n - pc0 * kPanelCols), c_rows.data(), accumulate);
    }
  }
}

template <class T, class TC>
void gemm_tn_serial(Isa isa, int64_t n, int64_t k, int64_t m, Rows<const T> a, Rows<const T> b,
                    TC* c, int64_t ldc, bool accumulate, void* scratch, int64_t scratch_bytes) {
  if (n == 0 || k == 0) return;
  if (m == 0) {
    if (!accumulate) zero_rows(Rows<TC>{c, ldc}, n, k);
    return;
  }
  const GemmKernels<T>& K = kernels<T>(isa);
  const int64_t chunk = reduction_chunk<T>(K, m, scratch_bytes / 4);  // the rest: A^T blocks
  check_tn_output<T, TC>(m, chunk);
  const auto tile = tile_fn<TC>(K);
  constexpr int64_t P = kPair<T>;
  const int64_t panels = (k + kPanelCols - 1) / kPanelCols;
  const int64_t panel_bytes = round_up(packed_elems(K, chunk) * int64_t(sizeof(T)), 64);
  T* panel = static_cast<T*>(scratch);
  T* at = panel + panel_bytes / int64_t(sizeof(T));
  const int64_t at_bytes = scratch_bytes - panel_bytes;
  const T* a_rows[kTileRows];
  TC* c_rows[kTileRows];
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    const int64_t mc = std::min(chunk, m - r0), mc_pad = round_up(mc, P);
    const bool acc = accumulate || r0 > 0;  // reduction chunks add up in order
    const int64_t nc = std::max<int64_t>(1, std::min(n, at_bytes / (mc_pad * int64_t(sizeof(T)))));
    for (int64_t n0 = 0; n0 < n; n0 += nc) {
      const int64_t nb = std::min(nc, n - n0);
      K.pack_at(at, a, r0, mc, n0, nb);
      for (int64_t q = 0; q < panels; ++q) {
        const int64_t k0 = q * kPanelCols, nj = std::min<int64_t>(kPanelCols, k - k0);
        pack_rows_panel(K, panel, b, r0, mc, k0, nj);
        for (int64_t i0 = 0; i0 < nb; i0 += kTileRows) {
          const int rows = int(std::min<int64_t>(kTileRows, nb - i0));
          for (int r = 0; r < rows; ++r) {
            a_rows[r] = at + (i0 + r) * P;
            c_rows[r] = c + (n0 + i0 + r) * ldc + k0;
          }
          tile(rows, a_rows, nb * P, panel, mc_pad, c_rows, nj, acc);
        }
      }
    }
  }
}

// A long reduction (the head's dx over a 262144-word vocabulary, an MLP's input gradient through
// its fused gate and up): slices of kReductionSlice (or what a packed panel allows, if less),
// added into an fp32 C in order; a bf16 C gets the fp32 sum rounded once.
template <class T, class TC>
void gemm_in_slices(Isa isa, int64_t m, int64_t n, int64_t k, Rows<const T> a, BMatrix<T> b,
                    Rows<TC> c, bool accumulate, const GemmScratch& scratch) {
  if constexpr (std::is_same_v<TC, float>) {
    const GemmKernels<T>& K = kernels<T>(isa);
    const int64_t slice = std::min(
        kReductionSlice,
        scratch.shared_bytes / (kPanelCols * int64_t(sizeof(T)) * K.b_width) / kPair<T> * kPair<T>);
    GEMMAX_CHECK(slice > 0, "gemm: the packing scratch holds no panel");
    for (int64_t k0 = 0; k0 < k; k0 += slice) {
      const Rows<const T> a_slice{a.base + k0, a.ld, a.map};
      const BMatrix<T> b_slice{b.transposed ? b.w + k0 : b.w + k0 * b.ldw, b.ldw, b.transposed};
      gemm<T, float>(isa, m, n, std::min(slice, k - k0), a_slice, b_slice, c, accumulate || k0 > 0,
                     scratch);
    }
  } else {
    // The fp32 sum of the slices, rounded once on every thread. Allocated per call, not zeroed
    // (the first slice writes it): this path runs only for reductions over 8192 long, where a
    // fresh page's nanosecond per element is a few percent of the element's 2k FLOPs at most
    // (the speeds above include it).
    const std::unique_ptr<float[]> sum(new float[size_t(m * n)]);
    gemm_in_slices<T, float>(isa, m, n, k, a, b, Rows<float>{sum.get(), n}, false, scratch);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      TC* row = c(i);
      const float* s = sum.get() + i * n;
      for (int64_t j = 0; j < n; ++j) row[j] = TC(accumulate ? float(row[j]) + s[j] : s[j]);
    }
  }
}

#define GEMMAX_GEMM(T, TC)                                                                        \
  template void gemm<T, TC>(Isa, int64_t, int64_t, int64_t, Rows<const T>, BMatrix<T>, Rows<TC>,  \
                            bool, const GemmScratch&);                                            \
  template void gemm_tn<T, TC>(Isa, int64_t, int64_t, int64_t, Rows<const T>, Rows<const T>, TC*, \
                               int64_t, bool, const GemmScratch&);                                \
  template void gemm_serial<T, TC>(Isa, int64_t, int64_t, int64_t, Rows<const T>, BMatrix<T>,     \
                                   Rows<TC>, bool, void*, int64_t);                               \
  template void gemm_tn_serial<T, TC>(Isa, int64_t, int64_t, int64_t, Rows<const T>,              \
                                      Rows<const T>, TC*, int64_t, bool, void*, int64_t);
GEMMAX_GEMM(bf16, bf16)
GEMMAX_GEMM(bf16, float)
GEMMAX_GEMM(float, float)
GEMMAX_GEMM(float, bf16)
#undef GEMMAX_GEMM

}  // namespace gemmax::cpu

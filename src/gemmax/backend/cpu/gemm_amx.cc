// The AMX kernel of the bf16 products: a tile of up to 14 rows x 32 columns accumulates in
// two fp32 tiles (columns 0-15 and 16-31) through tdpbf16ps, 32 reduction elements per step:
// A's rows (copied into a 64-byte-per-row tile buffer, since a row map scatters them) against
// the packed B panel, whose layout ([kc / 2][32][2]) is already the tile layout of B: each
// 16-column half is a tile read with a 128-byte stride. Written once over the tile layer
// (amx_tiles.h): HardwareTiles on AMX machines, EmulatedTiles everywhere else (tests, CI).
//
// The panels and A^T blocks are packed as for avx512_bf16 (AVX-512 on AMX machines; the
// avx2 packing, the same layout, under the emulation); fp32 products take the FMA kernels.
#include <algorithm>
#include <cstring>

#include "gemmax/backend/cpu/amx_tiles.h"
#include "gemmax/backend/cpu/gemm_kernels.h"

namespace gemmax::cpu {
namespace {

constexpr int64_t kStep = 32;  // reduction elements per tdpbf16ps: 64 bytes of a tile row

inline void store_row(bf16* c, const float* acc, int64_t nj, bool accumulate) {
  for (int64_t j = 0; j < nj; ++j) c[j] = bf16(accumulate ? float(c[j]) + acc[j] : acc[j]);
}
inline void store_row(float* c, const float* acc, int64_t nj, bool accumulate) {
  for (int64_t j = 0; j < nj; ++j) c[j] = accumulate ? c[j] + acc[j] : acc[j];
}

// Reduction elements [k0, k0 + kk) of a row given as pairs a_step apart (gemm_kernels.h) into
// a 32-element tile row, zero past kk.
inline void gather_row(bf16* dst, const bf16* row, int64_t a_step, int64_t k0, int64_t kk) {
  if (a_step == 2) {
    std::memcpy(static_cast<void*>(dst), row + k0, size_t(kk) * sizeof(bf16));
  } else {
    for (int64_t p = 0; p < kk; ++p) dst[p] = row[(k0 + p) / 2 * a_step + ((k0 + p) & 1)];
  }
  std::fill(dst + kk, dst + kStep, bf16{});
}

template <class Tiles, class TC>
void amx_tile(int rows, const bf16* const* a, int64_t a_step, const bf16* panel, int64_t kc,
              TC* const* c, int64_t nj, bool accumulate) {
  TileConfig cfg;
  for (int t : {0, 1, 2}) {  // C halves and A: `rows` rows of 64 bytes
    cfg.rows[t] = uint8_t(rows);
    cfg.colsb[t] = 64;
  }
  for (int t : {3, 4}) {  // B halves: 16 pairs of the reduction x 16 columns
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  Tiles::config(cfg);
  Tiles::template zero<0>();
  Tiles::template zero<1>();
  alignas(64) bf16 abuf[kTileRows][kStep];
  alignas(64) bf16 btail[16][2 * kPanelCols];
  for (int64_t k0 = 0; k0 < kc; k0 += kStep) {
    const int64_t kk = std::min(kStep, kc - k0);
    for (int r = 0; r < rows; ++r) gather_row(abuf[r], a[r], a_step, k0, kk);
    const bf16* b = panel + k0 / 2 * 2 * kPanelCols;
    if (kk < kStep) {  // the panel ends here: its last pairs, then zero rows
      const int64_t pairs = (kk + 1) / 2;
      std::memcpy(static_cast<void*>(btail[0]), b, size_t(pairs) * sizeof(btail[0]));
      std::memset(static_cast<void*>(btail[pairs]), 0, size_t(16 - pairs) * sizeof(btail[0]));
      b = btail[0];
    }
    Tiles::template load<2>(abuf, sizeof(abuf[0]));
    Tiles::template load<3>(b, sizeof(btail[0]));
    Tiles::template load<4>(b + kPanelCols, sizeof(btail[0]));
    Tiles::template dpbf16ps<0, 2, 3>();
    Tiles::template dpbf16ps<1, 2, 4>();
  }
  alignas(64) float out[kTileRows][kPanelCols];
  Tiles::template store<0>(out[0], sizeof(out[0]));
  Tiles::template store<1>(out[0] + 16, sizeof(out[0]));
  for (int r = 0; r < rows; ++r) store_row(c[r], out[r], nj, accumulate);
}

}  // namespace

template <>
const GemmKernels<bf16>& amx_kernels<bf16>(bool emulated) {
  static const GemmKernels<bf16> hw{avx512_bf16_kernels<bf16>().pack_b,
                                    avx512_bf16_kernels<bf16>().pack_at,
                                    amx_tile<HardwareTiles, bf16>, amx_tile<HardwareTiles, float>};
  static const GemmKernels<bf16> emu{avx2_kernels<bf16>().pack_b, avx2_kernels<bf16>().pack_at,
                                     amx_tile<EmulatedTiles, bf16>, amx_tile<EmulatedTiles, float>};
  return emulated ? emu : hw;
}

}  // namespace gemmax::cpu

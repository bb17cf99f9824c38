// The two builds of the tile layer (amx_tiles.h).
#include "gemmax/backend/cpu/amx_tiles.h"

#include <immintrin.h>

#include <bit>
#include <cstring>

#include "gemmax/base/error.h"

namespace gemmax::cpu {

// ---- the instructions ---------------------------------------------------------------------------
// Only called once isa.h found AMX-BF16 and the OS granted the tile state.

#define GEMMAX_AMX __attribute__((target("amx-tile,amx-bf16")))

GEMMAX_AMX void HardwareTiles::config(const TileConfig& cfg) { _tile_loadconfig(&cfg); }

// The intrinsics spell the tile number into the instruction text: a literal for each tile.
#define GEMMAX_EACH_TILE(op, ...)     \
  if constexpr (T == 0)               \
    op(0 __VA_OPT__(, ) __VA_ARGS__); \
  else if constexpr (T == 1)          \
    op(1 __VA_OPT__(, ) __VA_ARGS__); \
  else if constexpr (T == 2)          \
    op(2 __VA_OPT__(, ) __VA_ARGS__); \
  else if constexpr (T == 3)          \
    op(3 __VA_OPT__(, ) __VA_ARGS__); \
  else                                \
    op(4 __VA_OPT__(, ) __VA_ARGS__);

template <int T>
GEMMAX_AMX void HardwareTiles::zero() {
  GEMMAX_EACH_TILE(_tile_zero)
}
template <int T>
GEMMAX_AMX void HardwareTiles::load(const void* base, int64_t stride) {
  GEMMAX_EACH_TILE(_tile_loadd, base, stride)
}
template <int T>
GEMMAX_AMX void HardwareTiles::store(void* base, int64_t stride) {
  GEMMAX_EACH_TILE(_tile_stored, base, stride)
}
#undef GEMMAX_EACH_TILE
template <int C, int A, int B>
GEMMAX_AMX void HardwareTiles::dpbf16ps() {
  static_assert((C == 0 || C == 1) && A == 2 && (B == 3 || B == 4));
  if constexpr (C == 0)
    _tile_dpbf16ps(0, 2, 3);
  else
    _tile_dpbf16ps(1, 2, 4);
}

// The tiles the AMX kernel (and the bench's peak loop) use: C in 0 and 1, A in 2, B in 3 and 4.
template void HardwareTiles::zero<0>();
template void HardwareTiles::zero<1>();
template void HardwareTiles::load<2>(const void*, int64_t);
template void HardwareTiles::load<3>(const void*, int64_t);
template void HardwareTiles::load<4>(const void*, int64_t);
template void HardwareTiles::store<0>(void*, int64_t);
template void HardwareTiles::store<1>(void*, int64_t);
template void HardwareTiles::dpbf16ps<0, 2, 3>();
template void HardwareTiles::dpbf16ps<1, 2, 4>();

// ---- the emulation --------------------------------------------------------------------------
// Each thread has its own tile registers, as each hardware thread does.

namespace {

struct TileState {
  TileConfig cfg;
  bool valid = false;
  alignas(64) uint8_t tile[8][16][64];
};
thread_local TileState state;

void check_tile(int t) {
  GEMMAX_CHECK(state.valid, "AMX emulation: a tile instruction before ldtilecfg");
  GEMMAX_CHECK(t >= 0 && t < 8 && state.cfg.rows[t] > 0 && state.cfg.rows[t] <= 16 &&
                   state.cfg.colsb[t] > 0 && state.cfg.colsb[t] <= 64,
               "AMX emulation: tile ", t, " is not configured");
}

// A bf16 as fp32, denormals as zero (tdpbf16ps treats denormal inputs as zero).
float bf16_daz(uint16_t bits) {
  if ((bits & 0x7f80) == 0) bits &= 0x8000;
  return std::bit_cast<float>(uint32_t(bits) << 16);
}
float flush_denormal(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return (u & 0x7f800000u) == 0 ? std::bit_cast<float>(u & 0x80000000u) : x;
}

}  // namespace

// ldtilecfg: palette 1 only; loading a configuration zeroes every tile.
void EmulatedTiles::config(const TileConfig& cfg) {
  GEMMAX_CHECK(cfg.palette == 1, "AMX emulation: palette ", int(cfg.palette), " (only 1 exists)");
  state.cfg = cfg;
  state.valid = true;
  std::memset(state.tile, 0, sizeof(state.tile));
}

void EmulatedTiles::zero_tile(int t) {
  check_tile(t);
  std::memset(state.tile[t], 0, sizeof(state.tile[t]));
}

// tileloadd: row r from base + r * stride, colsb bytes; the rest of the row and the rows past
// `rows` become zero.
void EmulatedTiles::load_tile(int t, const void* base, int64_t stride) {
  check_tile(t);
  std::memset(state.tile[t], 0, sizeof(state.tile[t]));
  for (int r = 0; r < state.cfg.rows[t]; ++r)
    std::memcpy(state.tile[t][r], static_cast<const uint8_t*>(base) + r * stride,
                state.cfg.colsb[t]);
}

void EmulatedTiles::store_tile(int t, void* base, int64_t stride) {
  check_tile(t);
  for (int r = 0; r < state.cfg.rows[t]; ++r)
    std::memcpy(static_cast<uint8_t*>(base) + r * stride, state.tile[t][r], state.cfg.colsb[t]);
}

// tdpbf16ps C, A, B: C[m][n] += A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1], for k over A's
// pairs in order, each product exact in fp32 and each addition rounded to nearest even; inputs
// denormal as zero, results flushed to zero; MXCSR is not consulted. The shapes must agree
// (the instruction raises #UD otherwise).
void EmulatedTiles::dpbf16ps_tiles(int c, int a, int b) {
  check_tile(c);
  check_tile(a);
  check_tile(b);
  const TileConfig& g = state.cfg;
  const int M = g.rows[c], N = g.colsb[c] / 4, K = g.colsb[a] / 4;
  GEMMAX_CHECK(
      g.rows[a] == M && g.rows[b] == K && g.colsb[b] == g.colsb[c] && c != a && c != b && a != b,
      "AMX emulation: tdpbf16ps with tiles of mismatched shapes (#UD)");
  for (int m = 0; m < M; ++m) {
    float row[16];
    std::memcpy(row, state.tile[c][m], sizeof(row));
    uint16_t arow[32];
    std::memcpy(arow, state.tile[a][m], sizeof(arow));
    for (int k = 0; k < K; ++k) {
      uint16_t brow[32];
      std::memcpy(brow, state.tile[b][k], sizeof(brow));
      for (int n = 0; n < N; ++n) {
        row[n] = flush_denormal(row[n] + bf16_daz(arow[2 * k]) * bf16_daz(brow[2 * n]));
        row[n] = flush_denormal(row[n] + bf16_daz(arow[2 * k + 1]) * bf16_daz(brow[2 * n + 1]));
      }
    }
    std::memset(state.tile[c][m], 0, 64);
    std::memcpy(state.tile[c][m], row, size_t(N) * 4);
  }
}

}  // namespace gemmax::cpu

// A thin layer over the AMX tile instructions the AMX kernel uses (ldtilecfg, tilezero,
// tileloadd, tdpbf16ps, tilestored), in two builds: the instructions themselves
// (HardwareTiles, for CPUs whose OS grants AMX) and a host emulation written from Intel's
// definition of each instruction (EmulatedTiles), which runs anywhere. The AMX kernel is
// written once against this interface, so CI tests the very kernel code a Sapphire Rapids
// runs, the way cuda_emulated runs the CUDA kernels on the host.
#pragma once

#include <cstdint>

namespace gemmax::cpu {

// The 64-byte operand of ldtilecfg, palette 1: up to 8 tiles of up to 16 rows x 64 bytes.
struct TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile t
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Each operation names its tiles as template arguments: the instructions encode them.
struct HardwareTiles {
  static void config(const TileConfig& cfg);
  template <int T>
  static void zero();
  template <int T>
  static void load(const void* base, int64_t stride);
  template <int T>
  static void store(void* base, int64_t stride);
  template <int C, int A, int B>
  static void dpbf16ps();
};

struct EmulatedTiles {
  static void config(const TileConfig& cfg);
  template <int T>
  static void zero() {
    zero_tile(T);
  }
  template <int T>
  static void load(const void* base, int64_t stride) {
    load_tile(T, base, stride);
  }
  template <int T>
  static void store(void* base, int64_t stride) {
    store_tile(T, base, stride);
  }
  template <int C, int A, int B>
  static void dpbf16ps() {
    dpbf16ps_tiles(C, A, B);
  }

  static void zero_tile(int t);
  static void load_tile(int t, const void* base, int64_t stride);
  static void store_tile(int t, void* base, int64_t stride);
  static void dpbf16ps_tiles(int c, int a, int b);
};

}  // namespace gemmax::cpu

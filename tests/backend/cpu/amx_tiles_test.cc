// The host emulation of the AMX tile instructions (backend/cpu/amx_tiles.h) against Intel's
// definition, instruction by instruction: ldtilecfg zeroes the tiles; tileloadd reads `rows`
// rows of `colsb` bytes at a stride (tilestored writes as many); tdpbf16ps adds, per output, the
// pair products of A's row and B's column in order, rounding after each addition, with denormal
// inputs as zero and denormal results flushed; mismatched shapes are refused (#UD).
#include "gemmax/backend/cpu/amx_tiles.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "gemmax/base/dtype.h"
#include "gemmax/base/error.h"
#include "gemmax/base/rng.h"

namespace gemmax::cpu {
namespace {

using Tiles = EmulatedTiles;

TileConfig config(int m, int k_pairs, int n) {
  TileConfig cfg;
  cfg.rows[0] = uint8_t(m);  // C: m x n fp32
  cfg.colsb[0] = uint16_t(4 * n);
  cfg.rows[2] = uint8_t(m);  // A: m x 2 k_pairs bf16
  cfg.colsb[2] = uint16_t(4 * k_pairs);
  cfg.rows[3] = uint8_t(k_pairs);  // B: k_pairs x n pairs
  cfg.colsb[3] = uint16_t(4 * n);
  return cfg;
}

TEST(AmxEmulation, DotProductsFollowIntelsDefinition) {
  Rng rng(3);
  for (auto [m, kp, n] : {std::array<int, 3>{16, 16, 16}, {5, 3, 7}, {1, 1, 1}}) {
    Tiles::config(config(m, kp, n));
    std::vector<uint16_t> a(size_t(m * 2 * kp)), b(size_t(kp * 2 * n));
    std::vector<float> c0(size_t(m * n));
    for (auto& x : a) x = bf16(float(rng.normal())).bits;
    for (auto& x : b) x = bf16(float(rng.normal())).bits;
    for (auto& x : c0) x = float(rng.normal());
    Tiles::load_tile(2, a.data(), 4 * kp);
    Tiles::load_tile(3, b.data(), 4 * n);
    Tiles::load_tile(0, c0.data(), 4 * n);
    Tiles::dpbf16ps<0, 2, 3>();
    std::vector<float> c(size_t(m * n));
    Tiles::store_tile(0, c.data(), 4 * n);
    auto f = [](uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); };
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        float expect = c0[size_t(i * n + j)];  // fp32 additions in Intel's order
        for (int k = 0; k < kp; ++k)
          for (int e = 0; e < 2; ++e) {
            const float p =
                f(a[size_t(i * 2 * kp + 2 * k + e)]) * f(b[size_t(k * 2 * n + 2 * j + e)]);
            expect = float(expect + p);
          }
        EXPECT_EQ(c[size_t(i * n + j)], expect)
            << m << "x" << kp << "x" << n << " at " << i << "," << j;
      }
  }
}

TEST(AmxEmulation, DenormalsAreZeroAndResultsFlushed) {
  Tiles::config(config(1, 1, 1));
  const uint16_t tiny = 0x0001;                           // a bf16 denormal
  const uint16_t big = bf16(std::ldexp(1.0f, 100)).bits;  // tiny * big would be a normal 1e-10
  uint16_t a[2] = {tiny, bf16(1.0f).bits}, b[2] = {big, bf16(1e-30f).bits};
  Tiles::load_tile(2, a, 4);
  Tiles::load_tile(3, b, 4);
  Tiles::zero<0>();
  Tiles::dpbf16ps<0, 2, 3>();
  float c = -1;
  Tiles::store_tile(0, &c, 4);
  // tiny counts as 0; 1 * 1e-30 is normal.
  EXPECT_EQ(c, float(bf16(1e-30f)));
  uint16_t a2[2] = {bf16(1e-20f).bits, 0}, b2[2] = {bf16(1e-20f).bits, 0};
  Tiles::load_tile(2, a2, 4);
  Tiles::load_tile(3, b2, 4);
  Tiles::zero<0>();
  Tiles::dpbf16ps<0, 2, 3>();
  Tiles::store_tile(0, &c, 4);
  EXPECT_EQ(std::bit_cast<uint32_t>(c), 0u);  // 1e-40 is an fp32 denormal: flushed to +0
}

TEST(AmxEmulation, LoadsAndStoresMoveTheirRowsAndConfigZeroesTiles) {
  TileConfig cfg;
  cfg.rows[1] = 2;
  cfg.colsb[1] = 8;
  cfg.rows[4] = 3;
  cfg.colsb[4] = 64;
  Tiles::config(cfg);
  float src[3][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}};
  Tiles::load_tile(4, src, 16);  // 3 rows of 64 bytes from a 16-byte stride
  Tiles::load_tile(1, src, 16);  // 2 rows of 8 bytes
  float out[3][16];
  std::memset(out, 0xff, sizeof(out));
  Tiles::store_tile(1, out, sizeof(out[0]));
  EXPECT_EQ(out[0][0], 1);
  EXPECT_EQ(out[0][1], 2);
  EXPECT_EQ(out[1][0], 5);
  EXPECT_TRUE(std::isnan(out[0][2])) << "a store writes colsb bytes, no more";
  Tiles::config(cfg);  // ldtilecfg zeroes every tile
  Tiles::store_tile(4, out, sizeof(out[0]));
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 16; ++j) EXPECT_EQ(out[r][j], 0.0f);
}

TEST(AmxEmulation, MismatchedShapesAreRefused) {
  TileConfig cfg = config(4, 2, 4);
  cfg.rows[3] = 3;  // B's rows must be A's pairs
  Tiles::config(cfg);
  EXPECT_THROW((Tiles::dpbf16ps<0, 2, 3>()), Error);
  TileConfig unset;
  Tiles::config(unset);
  EXPECT_THROW(Tiles::zero_tile(0), Error);
}

}  // namespace
}  // namespace gemmax::cpu

// Dropout's keep mask (base/dropout_mask.h): the bits are SplitMix64's outputs, the integer
// threshold decides as the uniform comparison it stands for, and about 1 - p of the elements stay.
#include "gemmax/base/dropout_mask.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace gemmax {
namespace {

// SplitMix64 as a generator (Steele, Lea and Flood; Vigna's splitmix64.c).
struct SplitMix64 {
  uint64_t x;
  uint64_t next() {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

TEST(DropoutMask, BitsAreSplitMix64Outputs) {
  // The generator's published first outputs from seed 0.
  EXPECT_EQ(dropout_bits(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(dropout_bits(0, 1), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(dropout_bits(0, 2), 0x06C45D188009454Full);
  for (uint64_t seed : {0ull, 1ull, 1234567ull, ~0ull}) {
    SplitMix64 g{seed};
    for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(dropout_bits(seed, i), g.next()) << i;
  }
}

// keep iff (bits >> 11) * 2^-53 >= p, at the edges too: p equal to an element's uniform (kept)
// and one ulp above it (dropped).
TEST(DropoutMask, ThresholdDecidesAsTheUniform) {
  auto uniform = [](uint64_t seed, uint64_t i) {
    return double(dropout_bits(seed, i) >> 11) * std::ldexp(1.0, -53);
  };
  for (double p : {0.0, std::ldexp(1.0, -53), 1e-9, 0.1, 0.25, 0.5, 0.9, 1 - std::ldexp(1.0, -53)})
    for (uint64_t i = 0; i < 20000; ++i)
      ASSERT_EQ(dropout_keep(42, i, dropout_threshold(p)), uniform(42, i) >= p) << p << " " << i;
  for (uint64_t i = 0; i < 100; ++i) {
    const double u = uniform(9, i);
    EXPECT_TRUE(dropout_keep(9, i, dropout_threshold(u))) << i;
    EXPECT_FALSE(dropout_keep(9, i, dropout_threshold(std::nextafter(u, 1.0)))) << i;
  }
  EXPECT_EQ(dropout_threshold(0.0), 0u) << "p = 0 keeps everything";
}

TEST(DropoutMask, KeepsAboutOneMinusP) {
  const int64_t n = 1000000;
  for (double p : {0.05, 0.1, 0.5, 0.9})
    for (uint64_t seed : {0ull, 77ull}) {
      const uint64_t threshold = dropout_threshold(p);
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) kept += dropout_keep(seed, uint64_t(i), threshold);
      // Within 5 standard deviations of the binomial.
      EXPECT_NEAR(double(kept), (1 - p) * n, 5 * std::sqrt(n * p * (1 - p))) << p;
    }
}

}  // namespace
}  // namespace gemmax

// NF4 against bitsandbytes' definition, written out here: its code book (csrc/kernels.cu
// nf4_dequantization_lut, functional.py get_4bit_type("nf4")), its quantiser's decision tree
// (dQuantizeNF4, `>` at every node), the blockwise scaling (kQuantizeBlockwise: absmax per block,
// x times the float32 reciprocal) and the packing (element 2j in the high nibble).
#include "gemmax/base/nf4.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gemmax/base/rng.h"

namespace gemmax {
namespace {

constexpr double kCodeBook[16] = {-1.0,
                                  -0.6961928009986877,
                                  -0.5250730514526367,
                                  -0.39491748809814453,
                                  -0.28444138169288635,
                                  -0.18477343022823334,
                                  -0.09105003625154495,
                                  0.0,
                                  0.07958029955625534,
                                  0.16093020141124725,
                                  0.24611230194568634,
                                  0.33791524171829224,
                                  0.44070982933044434,
                                  0.5626170039176941,
                                  0.7229568362236023,
                                  1.0};
// Ascending: threshold k separates code values k and k + 1. bitsandbytes' literals, in double
// (their exact midpoints) and as its float32 literals compare them (the decimal rounded once: for
// thresholds 0, 8, 12 and 14 the midpoint is a float32 tie, which the literal breaks its own way,
// not to even).
constexpr double kThresholds[15] = {
    -0.8480964004993439,  -0.6106329262256622,  -0.4599952697753906,   -0.33967943489551544,
    -0.23460740596055984, -0.13791173323988914, -0.045525018125772476, 0.03979014977812767,
    0.1202552504837513,   0.2035212516784668,   0.2920137718319893,    0.3893125355243683,
    0.5016634166240692,   0.6427869200706482,   0.8614784181118011};
constexpr float kThresholdsF[15] = {
    -0.8480964004993439f,  -0.6106329262256622f,  -0.4599952697753906f,   -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f,   0.2035212516784668f,   0.2920137718319893f,    0.3893125355243683f,
    0.5016634166240692f,   0.6427869200706482f,   0.8614784181118011f};

// dQuantizeNF4, node for node (float32 comparisons with its float literals).
uint8_t bnb_tree(float x) {
  auto gt = [&](int k) { return x > kThresholdsF[k]; };
  if (gt(7)) {
    if (gt(11)) {
      if (gt(13)) return gt(14) ? 15 : 14;
      return gt(12) ? 13 : 12;
    }
    if (gt(9)) return gt(10) ? 11 : 10;
    return gt(8) ? 9 : 8;
  }
  if (gt(3)) {
    if (gt(5)) return gt(6) ? 7 : 6;
    return gt(4) ? 5 : 4;
  }
  if (gt(1)) return gt(2) ? 3 : 2;
  return gt(0) ? 1 : 0;
}

// bitsandbytes' blockwise quantisation, the reference for nf4_quantize: block b's absmax, its
// float32 reciprocal (0 for a zero block, whose elements are 0: index 7), and an odd n's missing
// last element quantised as a 0.
struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> absmax;
};
Quantized bnb_quantize(const std::vector<float>& x, int64_t block) {
  const int64_t n = int64_t(x.size()), blocks = (n + block - 1) / block;
  Quantized q{std::vector<uint8_t>(size_t(n + 1) / 2), std::vector<float>(size_t(blocks))};
  std::vector<uint8_t> index(size_t(n + 1));
  for (int64_t b = 0; b < blocks; ++b) {
    float m = 0;
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
      m = std::max(m, std::abs(x[size_t(i)]));
    q.absmax[size_t(b)] = m;
    const float r = m == 0 ? 0.0f : 1.0f / m;
    for (int64_t i = b * block; i < std::min(n + 1, (b + 1) * block); ++i)
      index[size_t(i)] = bnb_tree((i < n ? x[size_t(i)] : 0.0f) * r);
  }
  for (int64_t j = 0; j < (n + 1) / 2; ++j)
    q.codes[size_t(j)] = uint8_t(index[size_t(2 * j)] << 4 | index[size_t(2 * j + 1)]);
  return q;
}

Quantized quantize(const std::vector<float>& x, int64_t block) {
  const int64_t n = int64_t(x.size());
  Quantized q{std::vector<uint8_t>(size_t(n + 1) / 2, 0xAB),
              std::vector<float>(size_t((n + block - 1) / block), -1.0f)};
  nf4_quantize(x.data(), n, block, q.codes.data(), q.absmax.data());
  return q;
}

TEST(Nf4, CodeBookIsBitsandbytes) {
  for (uint32_t k = 0; k < 16; ++k) {
    EXPECT_EQ(nf4_value(k), float(kCodeBook[k])) << k;
    // The literals are the float32 values' shortest decimal forms.
    EXPECT_EQ(double(nf4_value(k)), kCodeBook[k]) << k;
    EXPECT_EQ(nf4_value(k + 16), nf4_value(k)) << "only the low nibble counts";
  }
  EXPECT_EQ(nf4_value(7), 0.0f);
}

// Each threshold is the exact midpoint of its two code values, and a value on it takes the lower
// index (bitsandbytes' `x > threshold`).
TEST(Nf4, ThresholdsAreMidpointsAndTiesGoDown) {
  for (int k = 0; k < 15; ++k) {
    EXPECT_EQ(kThresholds[k], (kCodeBook[k] + kCodeBook[k + 1]) / 2) << k;
    EXPECT_EQ(kThresholdsF[k] != float(kThresholds[k]), k == 0 || k == 8 || k == 12 || k == 14)
        << "the float32 ties of threshold " << k;
    const float t = kThresholdsF[k];
    EXPECT_EQ(int(nf4_index(t)), k) << "on threshold " << k;
    EXPECT_EQ(int(nf4_index(std::nextafter(t, 2.0f))), k + 1) << "just above threshold " << k;
    EXPECT_EQ(int(nf4_index(std::nextafter(t, -2.0f))), k) << "just below threshold " << k;
  }
  for (int k = 0; k < 16; ++k) EXPECT_EQ(int(nf4_index(float(kCodeBook[k]))), k);
  EXPECT_EQ(int(nf4_index(-0.0f)), 7);
  EXPECT_EQ(int(nf4_index(1.5f)), 15);
  EXPECT_EQ(int(nf4_index(-1.5f)), 0);
  EXPECT_EQ(int(nf4_index(std::numeric_limits<float>::quiet_NaN())), 0) << "every `>` fails";
}

TEST(Nf4, IndexIsBitsandbytesDecisionTree) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  for (float t : kThresholdsF)
    for (float f = std::nextafter(std::nextafter(t, -2.0f), -2.0f), i = 0; i < 5;
         ++i, f = std::nextafter(f, 2.0f))
      v.push_back(f);
  Rng rng(3);
  for (int i = 0; i < 100000; ++i) v.push_back(float(2.2 * rng.uniform() - 1.1));
  for (float x : v) ASSERT_EQ(int(nf4_index(x)), int(bnb_tree(x))) << x;
}

// Small cases worked by hand: the packing order, an odd n, a zero block.
TEST(Nf4, QuantizeSmallCasesByHand) {
  // absmax 1: indices 15, 0, 7 and 12 (0.5 lies between thresholds 11 and 12).
  Quantized q = quantize({1.0f, -1.0f, 0.0f, 0.5f}, 4);
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0xF0, 0x7C}));
  EXPECT_EQ(q.absmax, (std::vector<float>{1.0f}));
  // An odd n: x / 2 = 0.125 (9), -0.25 (4), 1 (15), and the missing fourth element a 0 (7).
  q = quantize({0.25f, -0.5f, 2.0f}, 4);
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x94, 0xF7}));
  EXPECT_EQ(q.absmax, (std::vector<float>{2.0f}));
  // Blocks of 2: a zero block has absmax 0 and the index of 0.
  q = quantize({0.0f, 0.0f, 3.0f, -3.0f, -0.0f}, 2);
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x77, 0xF0, 0x77}));
  EXPECT_EQ(q.absmax, (std::vector<float>{0.0f, 3.0f, 0.0f}));
}

TEST(Nf4, QuantizeMatchesBitsandbytesBlockwise) {
  Rng rng(7);
  struct Size {
    int64_t n, block;
  };
  for (const Size& z : {Size{1001, 64}, Size{4096, 64}, Size{777, 2}, Size{1000, 128}, Size{1, 64},
                        Size{300001, 256}}) {
    std::vector<float> x(size_t(z.n));
    for (float& v : x) v = float(0.02 * rng.normal());
    for (int64_t i = 0; i < std::min<int64_t>(z.block, z.n - 1); ++i) x[size_t(i)] = 0.0f;
    // Values on a threshold of their block's scale (absmax 1 in the block of x[last] = 1).
    const int64_t last = z.n - 1, lo = last / z.block * z.block;
    x[size_t(last)] = 1.0f;
    for (int64_t i = lo; i < last; ++i) x[size_t(i)] = kThresholdsF[(i - lo) % 15];
    const Quantized want = bnb_quantize(x, z.block), got = quantize(x, z.block);
    EXPECT_EQ(got.codes, want.codes) << "n " << z.n << " block " << z.block;
    EXPECT_EQ(got.absmax, want.absmax) << "n " << z.n << " block " << z.block;
  }
}

TEST(Nf4, DequantizeIsCodeValueTimesAbsmax) {
  // Every byte, twice, in blocks of 4; an odd n leaves the last low nibble unread.
  const int64_t n = 511, block = 4;
  std::vector<uint8_t> codes(256);
  for (int j = 0; j < 256; ++j) codes[size_t(j)] = uint8_t(j);
  std::vector<float> absmax(size_t((n + block - 1) / block)), out(size_t(n), -7.0f);
  Rng rng(5);
  for (float& a : absmax) a = float(std::ldexp(1.0 + rng.uniform(), int(rng.uniform_int(9)) - 6));
  nf4_dequantize(codes.data(), absmax.data(), n, block, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const int index = i % 2 == 0 ? codes[size_t(i / 2)] >> 4 : codes[size_t(i / 2)] & 15;
    // The float32 product: the exact product (in double) rounded once.
    ASSERT_EQ(out[size_t(i)], float(kCodeBook[index] * double(absmax[size_t(i / block)]))) << i;
  }
}

// Quantising then dequantising lands each element on a nearest code value of its block's scale.
TEST(Nf4, RoundTripIsNearest) {
  const int64_t n = 100003, block = 64;
  Rng rng(9);
  std::vector<float> x(static_cast<size_t>(n)), back(static_cast<size_t>(n));
  for (float& v : x) v = float(rng.normal());
  const Quantized q = quantize(x, block);
  nf4_dequantize(q.codes.data(), q.absmax.data(), n, block, back.data());
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = q.absmax[size_t(i / block)],
                 err = std::abs(double(back[size_t(i)]) - x[size_t(i)]);
    double nearest = INFINITY;
    for (double c : kCodeBook) nearest = std::min(nearest, std::abs(c * a - x[size_t(i)]));
    ASSERT_LE(err, nearest + 1e-6 * a) << i;
    worst = std::max(worst, err / a);
  }
  // Half the widest gap of the code book, between -1 and -0.696.
  EXPECT_LE(worst, (kCodeBook[1] - kCodeBook[0]) / 2 + 1e-6);
}

}  // namespace
}  // namespace gemmax

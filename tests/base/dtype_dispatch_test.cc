// The one bf16 type (host and cuda kernels alike) and the one dtype dispatch of every backend.
#include "gemmax/base/dtype_dispatch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "gemmax/backend/cuda/kernels/kernel_base.h"
#include "gemmax/base/rng.h"
#include "test_util.h"

namespace gemmax {
namespace {

using testing::expect_error;

// x rounded to bf16's 8 significant bits, nearest with ties to even, computed exactly in double
// (scaling by a power of two is exact): the oracle for both conversions.
double bf16_oracle(double x) {
  int e = 0;
  std::frexp(x, &e);                                      // |x| = m 2^e, m in [0.5, 1)
  const double scaled = std::ldexp(std::fabs(x), 8 - e);  // in [128, 256)
  double r = std::floor(scaled);
  const double rest = scaled - r;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(r, 2.0) == 1.0)) r += 1;
  return std::copysign(std::ldexp(r, e - 8), x);
}

// Values of normal magnitude, many of them a hair off a bf16 tie (where double rounding fails).
std::vector<double> near_ties(Rng& rng, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    const int e = int(rng.uniform() * 200) - 100;
    const double k = 128 + std::floor(rng.uniform() * 128);
    const double off = (i % 3 == 0) ? 0.0 : (i % 3 == 1 ? 1 : -1) * std::ldexp(1.0, -20 - i % 30);
    const double x = std::ldexp(k + 0.5 + off, e);
    v.push_back(i % 2 ? -x : x);
    v.push_back(rng.normal() * std::ldexp(1.0, e));
  }
  return v;
}

TEST(Bf16Type, RoundsOnceToNearestEvenFromFloatAndDouble) {
  Rng rng(11);
  for (double x : near_ties(rng, 4000)) {
    EXPECT_EQ(double(bf16(x)), bf16_oracle(x)) << std::hexfloat << x;
    const float f = float(x);
    EXPECT_EQ(double(bf16(f)), bf16_oracle(double(f))) << std::hexfloat << f;
  }
}

TEST(Bf16Type, KeepsNaNQuietAndInfinities) {
  const float nan_f = std::nanf(""), inf_f = INFINITY;
  EXPECT_TRUE(std::isnan(float(bf16(nan_f))));
  EXPECT_TRUE(std::isnan(float(bf16(double(nan_f)))));
  EXPECT_EQ(bf16(nan_f).bits & 0x40, 0x40);  // the quiet bit
  // A signalling NaN whose payload sits in the low 16 bits would truncate to infinity.
  uint32_t snan_bits = 0x7f800001u;
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  EXPECT_TRUE(std::isnan(float(bf16(snan))));
  EXPECT_EQ(float(bf16(inf_f)), inf_f);
  EXPECT_EQ(float(bf16(-1e300)), -inf_f);
  EXPECT_EQ(bf16(0x1.01p0f).bits, 0x3f80);  // a tie rounds to even
}

TEST(Bf16Type, FromBitsIsTheStoredPattern) {
  constexpr bf16 one = bf16::from_bits(0x3f80);
  static_assert(one.bits == 0x3f80);
  EXPECT_EQ(float(one), 1.0f);
  EXPECT_EQ(float(bf16::from_bits(0xc040)), -3.0f);
  EXPECT_EQ(bf16(float(bf16::from_bits(0x1234))).bits, 0x1234);  // exact round trip
}

// The kernels store and pack through the same type: what a kernel writes for a value is what
// host code writes for it.
TEST(Bf16Type, KernelStoresAreTheOracle) {
  Rng rng(12);
  for (double x : near_ties(rng, 1000)) {
    const float f = float(x);
    EXPECT_EQ(double(kern::from_double<bf16>(x)), bf16_oracle(x)) << std::hexfloat << x;
    EXPECT_EQ(double(kern::from_acc<bf16>(f)), bf16_oracle(double(f))) << std::hexfloat << f;
    const uint32_t packed = kern::pack_bf16(f, -f);
    EXPECT_EQ(double(kern::unpack_lo(packed)), bf16_oracle(double(f)));
    EXPECT_EQ(double(kern::unpack_hi(packed)), -bf16_oracle(double(f)));
  }
}

// Which branch ran, as the name of its dtype.
template <class... Ts>
std::string branch_of(const Tensor& t) {
  std::string ran;
  dispatch<Ts...>(t, "an op", [&]<class T>() { ran = std::string(dtype_name(dtype_of<T>())); });
  return ran;
}

TEST(DtypeDispatch, RunsTheBranchOfTheTensorsDtype) {
  for (DType d : {DType::F32, DType::BF16, DType::F64})
    EXPECT_EQ((branch_of<float, bf16, double>(Tensor::zeros({2}, d))), dtype_name(d));
  EXPECT_EQ((branch_of<int32_t, float>(Tensor::zeros({2}, DType::I32))), "int32");
  std::string pair;
  dispatch2<float, bf16>(Tensor::zeros({1}, DType::BF16), Tensor::zeros({1}, DType::F32), "op",
                         [&]<class A, class B>() {
                           pair = std::string(dtype_name(dtype_of<A>())) + "," +
                                  std::string(dtype_name(dtype_of<B>()));
                         });
  EXPECT_EQ(pair, "bfloat16,float32");
}

TEST(DtypeDispatch, OtherDtypesFailNamingTheOpTheTensorAndTheAcceptedDtypes) {
  const Tensor wide = Tensor::zeros({2, 3}, DType::F64);
  const std::string msg =
      expect_error([&] { dispatch<float, bf16>(wide, "gmm", [&]<class T>() {}); },
                   {"gmm: ", "float64[2, 3]", "expected float32 or bfloat16",
                    "(float64 runs: backend=reference)"});
  const std::string ints = expect_error(
      [&] {
        dispatch<float, bf16, double>(Tensor::zeros({4}, DType::I32), "rope", [&]<class T>() {});
      },
      {"rope: ", "int32[4]", "expected float32, bfloat16 or float64"});
  EXPECT_EQ(ints.find("backend=reference"), std::string::npos) << ints;
  // The second tensor of a pair is checked as well.
  expect_error(
      [&] {
        dispatch2<float, bf16>(Tensor::zeros({1}, DType::F32), Tensor::zeros({1}, DType::F64),
                               "copy", [&]<class A, class B>() {});
      },
      {"copy: ", "float64[1]"});
}

}  // namespace
}  // namespace gemmax

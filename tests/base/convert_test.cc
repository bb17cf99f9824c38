#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gemmax/base/convert.h"
#include "test_util.h"

namespace gemmax {
namespace {

using testing::expect_error;

TEST(Convert, FloatRoundTripsAreExactWhereRepresentable) {
  Tensor b = Tensor::empty({5}, DType::BF16);
  const float vals[] = {1.0f, -2.5f, 0.0f, 3.140625f, -1e30f};
  for (int i = 0; i < 5; ++i) b.data<bf16>()[i] = bf16(vals[i]);
  for (DType mid : {DType::F32, DType::F64}) {
    Tensor back = convert_dtype(convert_dtype(b, mid), DType::BF16);
    EXPECT_EQ(std::memcmp(back.raw(), b.raw(), b.nbytes()), 0) << dtype_name(mid);
  }
  Tensor f = convert_dtype(b, DType::F32);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f.data<float>()[i], float(b.data<bf16>()[i]));
}

TEST(Convert, Bf16RoundsToNearestEven) {
  Tensor f = Tensor::empty({4}, DType::F32);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties go to the even one (1.0).
  f.data<float>()[0] = 1.0f + std::ldexp(1.0f, -8);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  f.data<float>()[1] = 1.0f + 3 * std::ldexp(1.0f, -8);
  f.data<float>()[2] = 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20);  // above the tie
  f.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  Tensor b = convert_dtype(f, DType::BF16);
  const uint16_t* bits = static_cast<const uint16_t*>(b.raw());
  EXPECT_EQ(bits[0], 0x3F80);
  EXPECT_EQ(bits[1], 0x3F82);
  EXPECT_EQ(bits[2], 0x3F81);
  EXPECT_TRUE(std::isnan(float(b.data<bf16>()[3])));
}

TEST(Convert, F64ToBf16RoundsOnce) {
  Tensor d = Tensor::empty({3}, DType::F64);
  // Just above the tie 1 + 2^-8: correct rounding goes up. Via F32 it would become the exact
  // tie and round down to 1.0.
  d.data<double>()[0] = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  d.data<double>()[1] = -(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30));
  d.data<double>()[2] = 1e300;  // overflows to infinity
  Tensor b = convert_dtype(d, DType::BF16);
  const uint16_t* bits = static_cast<const uint16_t*>(b.raw());
  EXPECT_EQ(bits[0], 0x3F81);
  EXPECT_EQ(bits[1], 0xBF81);
  EXPECT_EQ(bits[2], 0x7F80);
}

TEST(Convert, F16IsReadable) {
  Tensor h = Tensor::empty({4}, DType::F16);
  uint16_t* p = static_cast<uint16_t*>(h.raw());
  p[0] = 0x3C00;  // 1.0
  p[1] = 0xC000;  // -2.0
  p[2] = 0x0001;  // smallest subnormal 2^-24
  p[3] = 0x7BFF;  // 65504
  Tensor f = convert_dtype(h, DType::F32);
  EXPECT_EQ(f.data<float>()[0], 1.0f);
  EXPECT_EQ(f.data<float>()[1], -2.0f);
  EXPECT_EQ(f.data<float>()[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(f.data<float>()[3], 65504.0f);
  Tensor d = convert_dtype(h, DType::F64);
  EXPECT_EQ(d.data<double>()[3], 65504.0);
  Tensor b = convert_dtype(h, DType::BF16);
  EXPECT_EQ(float(b.data<bf16>()[1]), -2.0f);
  expect_error([&] { convert_dtype(f, DType::F16); }, {"float16", "source only"});
}

TEST(Convert, Integers) {
  Tensor a = Tensor::empty({3}, DType::I32);
  a.data<int32_t>()[0] = -7;
  a.data<int32_t>()[1] = std::numeric_limits<int32_t>::max();
  a.data<int32_t>()[2] = std::numeric_limits<int32_t>::min();
  Tensor b = convert_dtype(a, DType::I64);
  EXPECT_EQ(b.data<int64_t>()[0], -7);
  EXPECT_EQ(b.data<int64_t>()[2], std::numeric_limits<int32_t>::min());
  Tensor c = convert_dtype(b, DType::I32);
  EXPECT_EQ(std::memcmp(c.raw(), a.raw(), a.nbytes()), 0);
  b.data<int64_t>()[1] = int64_t(1) << 40;
  expect_error([&] { convert_dtype(b, DType::I32); }, {"element 1", "1099511627776", "int32"});
}

TEST(Convert, SameDtypeCopiesAndOthersAreRefused) {
  Tensor a = Tensor::zeros({2, 2}, DType::F32);
  Tensor b = convert_dtype(a, DType::F32, MemKind::Params);
  EXPECT_NE(a.raw(), b.raw());
  EXPECT_EQ(b.shape(), a.shape());
  EXPECT_EQ(b.mem_kind(), MemKind::Params);
  expect_error([&] { convert_dtype(a, DType::I32); }, {"float32[2, 2]", "int32"});
  Tensor e = convert_dtype(Tensor::empty({0, 3}, DType::BF16), DType::F32);
  EXPECT_EQ(e.numel(), 0);
}

}  // namespace
}  // namespace gemmax

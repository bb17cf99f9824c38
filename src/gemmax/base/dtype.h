// Element types and the bfloat16 storage type.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "gemmax/base/host_device.h"

namespace gemmax {

enum class DType : uint8_t { F32, F64, BF16, F16, I32, I64, U8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "float32", "bfloat16", ...
// Accepts MaxText / numpy spellings: float32, fp32, f32, bfloat16, bf16, float64, ...
DType parse_dtype(std::string_view s);
bool is_float(DType t);

// bfloat16: the upper 16 bits of an IEEE float32. Conversion rounds to nearest even, once:
// from a double too (kernels that sum in fp64 round their result to bf16 in one step). The one
// bf16 type of host code and of the cuda kernels (device code) alike.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  GEMMAX_HOST_DEVICE explicit bf16(float f) : bits(round_bits(f)) {}
  GEMMAX_HOST_DEVICE explicit bf16(double d) : bits(round_bits(d)) {}
  GEMMAX_HOST_DEVICE static constexpr bf16 from_bits(uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }
  GEMMAX_HOST_DEVICE explicit operator float() const { return as_float(uint32_t(bits) << 16); }
  GEMMAX_HOST_DEVICE explicit operator double() const { return double(float(*this)); }  // exact

  GEMMAX_HOST_DEVICE static uint16_t round_bits(float f) {
    uint32_t u = as_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
  GEMMAX_HOST_DEVICE static uint16_t round_bits(double d) {
    // Rounding F64 -> F32 -> BF16 with nearest-even twice can differ from one rounding (a
    // value just above a BF16 tie becomes an exact tie in F32). Rounding to F32 *to odd*
    // first keeps the information the second rounding needs, since F32 has more than BF16's
    // bits + 2.
    // Branch-free, so that loops storing bf16 results vectorise. (A NaN compares unequal to
    // itself and may get its low bit set: it stays a NaN.)
    const float f = float(d);
    const uint32_t u = as_bits(f);
    const uint32_t fix = uint32_t(double(f) != d) & ~u & 1u;  // inexact and even: move to odd
    const uint32_t up = uint32_t(abs(d) > abs(double(f)));    // d's side of f
    return round_bits(as_float(u + fix * (2 * up - 1)));
  }

  // The bits of a float32 and back (device code has no std::bit_cast).
  GEMMAX_HOST_DEVICE static float as_float(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    return std::bit_cast<float>(u);
#endif
  }
  GEMMAX_HOST_DEVICE static uint32_t as_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    return std::bit_cast<uint32_t>(f);
#endif
  }

 private:
  GEMMAX_HOST_DEVICE static double abs(double v) {
#ifdef __CUDA_ARCH__
    return fabs(v);
#else
    return std::fabs(v);
#endif
  }
};

// IEEE binary16, read only (F16 checkpoints are converted on load).
float half_to_float(uint16_t h);

}  // namespace gemmax

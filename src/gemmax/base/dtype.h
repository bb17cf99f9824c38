// Element types and the bfloat16 storage type.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace gemmax {

enum class DType : uint8_t { F32, F64, BF16, F16, I32, I64, U8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "float32", "bfloat16", ...
// Accepts MaxText / numpy spellings: float32, fp32, f32, bfloat16, bf16, float64, ...
DType parse_dtype(std::string_view s);
bool is_float(DType t);

// bfloat16: the upper 16 bits of an IEEE float32. Conversion rounds to nearest even, once:
// from a double too (kernels that sum in fp64 round their result to bf16 in one step).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(round_bits(f)) {}
  explicit bf16(double d) : bits(round_bits(d)) {}
  explicit operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }
  explicit operator double() const { return double(float(*this)); }  // exact

  static uint16_t round_bits(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
  static uint16_t round_bits(double d) {
    // Rounding F64 -> F32 -> BF16 with nearest-even twice can differ from one rounding (a
    // value just above a BF16 tie becomes an exact tie in F32). Rounding to F32 *to odd*
    // first keeps the information the second rounding needs, since F32 has more than BF16's
    // bits + 2.
    // Branch-free, so that loops storing bf16 results vectorise. (A NaN compares unequal to
    // itself and may get its low bit set: it stays a NaN.)
    const float f = float(d);
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t fix = uint32_t(double(f) != d) & ~u & 1u;  // inexact and even: move to odd
    const uint32_t up = uint32_t(std::fabs(d) > std::fabs(double(f)));  // d's side of f
    return round_bits(std::bit_cast<float>(u + fix * (2 * up - 1)));
  }
};

// IEEE binary16, read only (F16 checkpoints are converted on load).
float half_to_float(uint16_t h);

}  // namespace gemmax

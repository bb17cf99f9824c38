// Elementwise math of the cpu backend's kernels: branch-free float code that the compiler
// vectorises inside `#pragma omp simd` loops (8 lanes with AVX2, 16 with AVX-512), plus the
// bf16 conversions. Accuracy: a few ulp of fp32, far inside what bf16 activations resolve and
// inside the fp32 parity tolerances.
#pragma once

#include <bit>
#include <cstdint>

#include "gemmax/base/dtype.h"

// Always inlined: a call left in a `#pragma omp simd` loop stops its vectorisation, and the
// compiler's own inlining budget drops these calls as a file grows.
#define GEMMAX_VEC_INLINE [[gnu::always_inline]] inline

namespace gemmax::cpu {

// bf16 <-> fp32. to_bf16 rounds to nearest even (NaN stays NaN).
GEMMAX_VEC_INLINE float to_f32(bf16 x) { return std::bit_cast<float>(uint32_t(x.bits) << 16); }
GEMMAX_VEC_INLINE float to_f32(float x) { return x; }
GEMMAX_VEC_INLINE bf16 to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  bf16 b;
  b.bits = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  return b;
}
template <class T>
GEMMAX_VEC_INLINE T from_f32(float f) {
  if constexpr (sizeof(T) == 2)
    return to_bf16(f);
  else
    return f;
}

// f rounded to T's precision, as an fp32 value (exact in T).
template <class T>
GEMMAX_VEC_INLINE float round_f32(float f) {
  if constexpr (sizeof(T) == 2)
    return to_f32(to_bf16(f));
  else
    return f;
}

// e^x: x = n ln2 + r, |r| <= ln2 / 2, e^r by its degree-6 Taylor polynomial, 2^n in the
// exponent bits. Relative error below 2e-7; 0 below -87.3, +inf above 88.7.
GEMMAX_VEC_INLINE float exp_approx(float x) {
  const float lo = -87.33f, hi = 88.72f;
  const bool over = x > hi;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const float n = __builtin_rintf(x * 1.44269504088896341f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 in two parts
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>(uint32_t(int32_t(n) + 127) << 23);
  const float e = p * scale;
  return over ? __builtin_inff() : (x <= lo ? 0.0f : e);
}

// 1 / (1 + e^-x)
GEMMAX_VEC_INLINE float sigmoid_approx(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

// tanh x = 2 sigmoid(2x) - 1
GEMMAX_VEC_INLINE float tanh_approx(float x) { return 2.0f * sigmoid_approx(2.0f * x) - 1.0f; }

// GELU with the tanh approximation, as x * sigmoid(2u) (= 0.5 x (1 + tanh u)), and its
// derivative s + 2 x s (1 - s) u', u = sqrt(2/pi) (x + 0.044715 x^3).
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
GEMMAX_VEC_INLINE float gelu_tanh(float x) {
  const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return x * sigmoid_approx(2.0f * u);
}
GEMMAX_VEC_INLINE float gelu_tanh_grad(float x) {
  const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  const float du = kSqrt2OverPi * (1.0f + 0.134145f * x * x);
  const float s = sigmoid_approx(2.0f * u);
  return s + 2.0f * x * s * (1.0f - s) * du;
}

}  // namespace gemmax::cpu

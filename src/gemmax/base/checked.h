// Overflow-checked size arithmetic: the one way sizes derived from user input (config keys,
// file headers, flags) are multiplied and added. A result that 64 bits cannot hold is an error
// naming what was being computed, never a wrapped (negative) number.
//
//   const int64_t tokens = checked_mul(batch, seq, "per_device_batch_size x max_target_length");
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace gemmax {

// Throws gemmax::Error: "<what> (a x b) does not fit in 64 bits; lower one of them".
[[noreturn]] void fail_size_overflow(std::string_view what, int64_t a, int64_t b, char op);

inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail_size_overflow(what, a, b, 'x');
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail_size_overflow(what, a, b, '+');
  return r;
}

inline int64_t checked_product(std::initializer_list<int64_t> factors, std::string_view what) {
  int64_t r = 1;
  for (int64_t f : factors) r = checked_mul(r, f, what);
  return r;
}

}  // namespace gemmax

// Which elements dropout keeps: a hash of (seed, element index) rather than a generator's stream,
// so that every backend, on any thread layout, host or device, keeps the same elements, and the
// backward (the same op on the gradient, with the same seed) drops what the forward dropped.
#pragma once

#include <cmath>
#include <cstdint>

#include "gemmax/base/host_device.h"

namespace gemmax {

// 64 random bits for element i: output i of SplitMix64 seeded with `seed` (its state after i + 1
// steps, mixed), which is splitmix64(seed + i * 0x9E3779B97F4A7C15).
GEMMAX_HOST_DEVICE inline uint64_t dropout_bits(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element i is kept iff u >= p, u = (bits >> 11) * 2^-53 uniform on [0, 1). As u * 2^53 is an
// integer, that is (bits >> 11) >= ceil(p * 2^53): the threshold, computed once per call, leaves
// an integer comparison per element (which vectorises, and has no rounding to differ in).
inline uint64_t dropout_threshold(double p) { return uint64_t(std::ceil(std::ldexp(p, 53))); }

GEMMAX_HOST_DEVICE inline bool dropout_keep(uint64_t seed, uint64_t i, uint64_t threshold) {
  return (dropout_bits(seed, i) >> 11) >= threshold;
}

}  // namespace gemmax

#include "gemmax/data/numpy_random.h"

#include <limits>

#include "gemmax/base/error.h"

namespace gemmax {
namespace {

// SeedSequence's hash constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd,
                   kMultB = 0x58f38ded, kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16;
constexpr size_t kPoolSize = 4;

constexpr unsigned __int128 kPcgMultiplier =
    (unsigned __int128)(2549297995355413924ULL) << 64 | 4865540595714422341ULL;

}  // namespace

std::vector<uint32_t> numpy_seed_sequence_state(std::span<const uint32_t> entropy,
                                                size_t n_words) {
  uint32_t hash = kInitA;
  const auto hashmix = [&](uint32_t v) {
    v ^= hash;
    hash *= kMultA;
    v *= hash;
    return v ^ (v >> kXShift);
  };
  const auto mix = [](uint32_t x, uint32_t y) {
    uint32_t r = kMixMultL * x - kMixMultR * y;
    return r ^ (r >> kXShift);
  };
  uint32_t pool[kPoolSize];
  for (size_t i = 0; i < kPoolSize; ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0);
  for (size_t src = 0; src < kPoolSize; ++src)
    for (size_t dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  for (size_t src = kPoolSize; src < entropy.size(); ++src)
    for (size_t dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src]));
  std::vector<uint32_t> out(n_words);
  uint32_t hash_b = kInitB;
  for (size_t i = 0; i < n_words; ++i) {
    uint32_t v = pool[i % kPoolSize] ^ hash_b;
    hash_b *= kMultB;
    v *= hash_b;
    out[i] = v ^ (v >> kXShift);
  }
  return out;
}

std::vector<uint32_t> numpy_seed_sequence_state(uint64_t entropy, size_t n_words) {
  // A Python int becomes its 32-bit words, least significant first; 0 is one word.
  std::vector<uint32_t> words{uint32_t(entropy)};
  if (entropy >> 32) words.push_back(uint32_t(entropy >> 32));
  return numpy_seed_sequence_state(words, n_words);
}

NumpyRandom::NumpyRandom(uint64_t seed) {
  // PCG64 seeds from generate_state(4, uint64): words 0-1 the state, 2-3 the increment, each
  // 128-bit value high word first; each uint64 is two uint32 words, low first.
  const std::vector<uint32_t> w = numpy_seed_sequence_state(seed, 8);
  uint64_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = uint64_t(w[2 * i]) | uint64_t(w[2 * i + 1]) << 32;
  const unsigned __int128 init_state = (unsigned __int128)v[0] << 64 | v[1];
  const unsigned __int128 init_seq = (unsigned __int128)v[2] << 64 | v[3];
  // pcg_setseq_128_srandom_r
  inc_ = init_seq << 1 | 1;
  state_ = inc_;  // one step from state 0
  state_ += init_state;
  state_ = state_ * kPcgMultiplier + inc_;
}

uint64_t NumpyRandom::next_uint64() {
  state_ = state_ * kPcgMultiplier + inc_;
  // XSL-RR: the halves xor-ed, rotated right by the top 6 bits.
  const uint64_t x = uint64_t(state_ >> 64) ^ uint64_t(state_);
  const unsigned rot = unsigned(state_ >> 122);
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t NumpyRandom::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uint32_;
  }
  const uint64_t v = next_uint64();
  has_uint32_ = true;
  uint32_ = uint32_t(v >> 32);
  return uint32_t(v);
}

int64_t NumpyRandom::integers(int64_t low, int64_t high) {
  if (high <= low) fail("integers: low ", low, " >= high ", high);
  // random_bounded_uint64_fill with use_masked=false: Lemire's multiply-shift rejection, on 32-bit
  // draws when the range fits them.
  const uint64_t rng = uint64_t(high) - uint64_t(low) - 1;
  if (rng == 0) return low;
  if (rng <= 0xFFFFFFFFu) {
    if (rng == 0xFFFFFFFFu) return low + int64_t(next_uint32());
    const uint32_t excl = uint32_t(rng) + 1;
    uint64_t m = uint64_t(next_uint32()) * excl;
    if (uint32_t(m) < excl) {
      const uint32_t threshold = (0xFFFFFFFFu - uint32_t(rng)) % excl;
      while (uint32_t(m) < threshold) m = uint64_t(next_uint32()) * excl;
    }
    return low + int64_t(m >> 32);
  }
  if (rng == std::numeric_limits<uint64_t>::max()) return int64_t(uint64_t(low) + next_uint64());
  const uint64_t excl = rng + 1;
  unsigned __int128 m = (unsigned __int128)next_uint64() * excl;
  if (uint64_t(m) < excl) {
    const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - rng) % excl;
    while (uint64_t(m) < threshold) m = (unsigned __int128)next_uint64() * excl;
  }
  return int64_t(uint64_t(low) + uint64_t(m >> 64));
}

uint64_t NumpyRandom::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s < 64; s <<= 1) mask |= mask >> s;
  uint64_t v;
  if (max <= 0xFFFFFFFFu) {
    while ((v = next_uint32() & mask) > max) {
    }
  } else {
    while ((v = next_uint64() & mask) > max) {
    }
  }
  return v;
}

std::vector<uint64_t> NumpyRandom::permutation(uint64_t n) {
  std::vector<uint64_t> p(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = i;
  shuffle(std::span<uint64_t>(p));
  return p;
}

}  // namespace gemmax

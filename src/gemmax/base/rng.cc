#include "gemmax/base/rng.h"

#include <cmath>
#include <vector>

namespace gemmax {

static uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void Rng::seed_from(uint64_t seed) {
  for (auto& w : s_) w = splitmix64(seed);
}

// The state transition of xoshiro256 (the output function aside).
static void advance(Rng::State& s) {
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  advance(s_);
  return result;
}

namespace {

// A 256 x 256 matrix over GF(2), as its columns: column j is the image of state bit j.
using BitMatrix = std::vector<Rng::State>;

Rng::State apply(const BitMatrix& m, const Rng::State& v) {
  Rng::State out{};
  for (int j = 0; j < 256; ++j)
    if ((v[j / 64] >> (j % 64)) & 1)
      for (int w = 0; w < 4; ++w) out[w] ^= m[j][w];
  return out;
}

// powers[k] is the transition applied 2^k times.
const std::vector<BitMatrix>& transition_powers() {
  static const std::vector<BitMatrix> powers = [] {
    std::vector<BitMatrix> p(64, BitMatrix(256));
    for (int j = 0; j < 256; ++j) {
      Rng::State e{};
      e[j / 64] = uint64_t(1) << (j % 64);
      advance(e);
      p[0][j] = e;
    }
    for (int k = 1; k < 64; ++k)
      for (int j = 0; j < 256; ++j) p[k][j] = apply(p[k - 1], p[k - 1][j]);
    return p;
  }();
  return powers;
}

}  // namespace

void Rng::discard(uint64_t n) {
  if (n < 64) {  // cheaper stepped than multiplied
    for (; n > 0; --n) advance(s_);
    return;
  }
  const std::vector<BitMatrix>& powers = transition_powers();
  for (int k = 0; k < 64; ++k)
    if ((n >> k) & 1) s_ = apply(powers[k], s_);
}

double Rng::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

uint64_t Rng::uniform_int(uint64_t n) {
  // Rejection sampling: no modulo bias.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return x % n;
}

double Rng::normal() {
  // Box-Muller; one of the pair is dropped so the state advances by a fixed amount per call.
  const double u1 = 1.0 - uniform();  // (0, 1]
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace gemmax

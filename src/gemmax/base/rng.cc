#include "gemmax/base/rng.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
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

namespace {

// The inverse of erf on (-1, 1): Giles' single-precision approximation ("Approximating the erfinv
// function", 2010), then two Newton steps on erf to double precision.
double erf_inverse(double y) {
  const double w0 = -std::log((1.0 - y) * (1.0 + y));
  double p;
  if (w0 < 5.0) {
    const double w = w0 - 2.5;
    p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                     -0.00125372503, -0.00417768164, 0.246640727, 1.50140941})
      p = c + p * w;
  } else {
    const double w = std::sqrt(w0) - 3.0;
    p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                     -0.0076224613, 0.00943887047, 1.00167406, 2.83297682})
      p = c + p * w;
  }
  double x = p * y;
  for (int i = 0; i < 2; ++i) x -= (std::erf(x) - y) / (M_2_SQRTPI * std::exp(-x * x));
  return x;
}

}  // namespace

double Rng::truncated_normal() {
  static const double lo = std::erf(-M_SQRT2), hi = std::erf(M_SQRT2);  // erf(±2/√2)
  const double x = M_SQRT2 * erf_inverse(lo + (hi - lo) * uniform());
  return std::clamp(x, -2.0, 2.0);
}

}  // namespace gemmax

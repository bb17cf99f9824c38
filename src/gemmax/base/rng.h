// Deterministic random numbers with a small, saveable state (xoshiro256**, seeded by splitmix64).
#pragma once

#include <array>
#include <cstdint>

namespace gemmax {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { seed_from(seed); }
  // An independent stream for (seed, stream): used so that each parameter's initial values do
  // not depend on the order in which parameters are initialised.
  Rng(uint64_t seed, uint64_t stream) { seed_from(seed ^ (0x9e3779b97f4a7c15ull * (stream + 1))); }

  uint64_t next_u64();
  double uniform();                  // [0, 1)
  uint64_t uniform_int(uint64_t n);  // [0, n)
  double normal();                   // N(0, 1); consumes exactly two next_u64()
  // N(0, 1) cut to [-2, 2] (not rescaled: its standard deviation is 0.8796...), by inverting the
  // CDF as JAX's truncated_normal does; consumes exactly one next_u64().
  double truncated_normal();

  // Advances the state as `n` calls of next_u64() would, in O(log n) (the state transition is
  // linear over GF(2); its powers 2^k are computed once). Lets a rank generate its shard of a
  // parameter's initial values without generating the values before it.
  void discard(uint64_t n);

  using State = std::array<uint64_t, 4>;

 private:
  void seed_from(uint64_t seed);
  State s_{};
};

}  // namespace gemmax

// numpy's default random generator, np.random.default_rng(seed), bit for bit: the SeedSequence
// that turns the seed into PCG64's state, PCG64 itself, and the Generator methods that Hugging
// Face datasets' shuffles draw with (integers, shuffle, permutation). docs/DATA.md.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace gemmax {

// np.random.SeedSequence(entropy).generate_state(n_words, np.uint32) for a non-negative integer
// entropy given as its 32-bit words, least significant first (no spawn key, pool of 4 words).
std::vector<uint32_t> numpy_seed_sequence_state(std::span<const uint32_t> entropy, size_t n_words);
// The same for an integer entropy (words as numpy splits a Python int).
std::vector<uint32_t> numpy_seed_sequence_state(uint64_t entropy, size_t n_words);

// np.random.default_rng(seed): a Generator over PCG64 (128-bit LCG, XSL-RR output).
class NumpyRandom {
 public:
  explicit NumpyRandom(uint64_t seed);

  uint64_t next_uint64();
  // PCG64's 32-bit draws halve one 64-bit draw (low half first) and keep the high half for the
  // next call, as numpy's bit generator does.
  uint32_t next_uint32();
  // Generator.integers(low, high) for dtype int64 (the default), one value; a size=k call is k
  // of these in order.
  int64_t integers(int64_t low, int64_t high);
  // numpy's random_interval: uniform in [0, max] by masked rejection.
  uint64_t interval(uint64_t max);
  // Generator.shuffle of a list or a 1-D array: Fisher-Yates from the back.
  template <class T>
  void shuffle(std::span<T> x) {
    for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[size_t(interval(i))]);
  }
  std::vector<uint64_t> permutation(uint64_t n);  // Generator.permutation(n)

 private:
  unsigned __int128 state_ = 0, inc_ = 0;
  bool has_uint32_ = false;
  uint32_t uint32_ = 0;
};

}  // namespace gemmax

#include "gemmax/data/shuffle.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gemmax/base/error.h"

namespace gemmax {
namespace {

// One Feistel network of the Simon cipher on two words of `w` bits (8 <= w <= 32), with grain's
// round keys: std::seed_seq{seed} (the standard fixes its output), not Simon's key schedule.
uint64_t simon_encrypt(uint64_t value, int w, const std::vector<uint32_t>& keys) {
  const uint64_t mask = (uint64_t(1) << w) - 1;
  const auto rotl = [&](uint64_t x, int r) { return ((x << r) | (x >> (w - r))) & mask; };
  const auto f = [&](uint64_t x) { return (rotl(x, 1) & rotl(x, 8)) ^ rotl(x, 2); };
  uint64_t left = (value >> w) & mask, right = value & mask;
  for (size_t i = 0; i + 1 < keys.size(); i += 2) {
    left ^= f(right);
    left ^= keys[i] & mask;
    right ^= f(left);
    right ^= keys[i + 1] & mask;
  }
  return (left << w) | right;
}

}  // namespace

uint64_t grain_index_shuffle(uint64_t index, uint64_t max_index, uint32_t seed, uint32_t rounds) {
  GEMMAX_CHECK(rounds >= 4 && rounds % 2 == 0, "index_shuffle: rounds ", rounds);
  GEMMAX_CHECK(index <= max_index, "index_shuffle: index ", index, " > max_index ", max_index);
  if (max_index == 0) return 0;
  // grain's block: ceil(log2(max_index)) bits rounded up to even, at least 16; words of half.
  int block = int(std::ceil(std::log2(double(max_index))));
  block = std::max(block + block % 2, 16);
  GEMMAX_CHECK(block <= 64, "index_shuffle: max_index ", max_index);
  std::vector<uint32_t> keys(rounds);
  std::seed_seq seq{seed};
  seq.generate(keys.begin(), keys.end());
  // The cipher permutes [0, 2^block); walking the cycle until the value is in range permutes
  // [0, max_index].
  uint64_t v = index;
  do v = simon_encrypt(v, block / 2, keys);
  while (v > max_index);
  return v;
}

WindowShuffle::WindowShuffle(uint64_t num_documents, uint64_t window, uint64_t seed)
    : n_(num_documents), window_(window), seed_(seed) {
  GEMMAX_CHECK(n_ > 0, "a document order over no documents");
}

uint64_t WindowShuffle::document(uint64_t position) const {
  if (window_ == 0) return position % n_;
  // grain fills a window from the stream, permutes it and pops from the back: the k-th document
  // handed on is the permutation's entry window - 1 - k.
  const uint64_t w = position / window_, k = position % window_;
  const uint64_t in_window = grain_index_shuffle(window_ - 1 - k, window_ - 1, uint32_t(seed_ + w));
  return (w * window_ + in_window) % n_;
}

}  // namespace gemmax

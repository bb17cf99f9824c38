// The document order of MaxText's grain pipeline: grain's index_shuffle (a cycle-walking Simon
// cipher) and the window shuffle MaxText applies to a stream of documents (docs/DATA.md).
#pragma once

#include <cstdint>

namespace gemmax {

// The position of `index` in grain's pseudorandom permutation of [0, max_index] for `seed`:
// grain.experimental.index_shuffle(index, max_index, seed, rounds), bit for bit.
uint64_t grain_index_shuffle(uint64_t index, uint64_t max_index, uint32_t seed,
                             uint32_t rounds = 4);

// Which document comes at each position of an endless stream of documents (epoch after epoch).
class DocumentOrder {
 public:
  virtual ~DocumentOrder() = default;
  virtual uint64_t document(uint64_t position) const = 0;
  virtual uint64_t epoch(uint64_t position) const = 0;
  virtual uint64_t documents() const = 0;  // per epoch
};

// The documents of an endless stream (0, 1, ..., N - 1, 0, 1, ...: one epoch after another), in
// the order grain's WindowShuffleIterDataset(window_size = window, seed) hands them on: each
// window of `window` stream positions is permuted with seed + its index. window = 0: in order.
class WindowShuffle final : public DocumentOrder {
 public:
  WindowShuffle(uint64_t num_documents, uint64_t window, uint64_t seed);
  uint64_t document(uint64_t position) const override;
  uint64_t epoch(uint64_t position) const override { return position / n_; }
  uint64_t documents() const override { return n_; }

 private:
  uint64_t n_, window_, seed_;
};

}  // namespace gemmax

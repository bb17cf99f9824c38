// The document order of MaxText's Hugging Face pipeline (dataset_type=hf, docs/DATA.md): the
// streaming dataset's shuffle of `datasets` (its files shuffled, each file's rows through a
// 1000-row buffer) as MaxText's HFDataSource reads it on one data-loading host. The buffer is
// that of datasets 5.x, or of 4.x (hf_datasets_version), which MaxText 0.2.5 also accepts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gemmax/data/shuffle.h"

namespace gemmax {

// datasets' IterableDataset.shuffle default buffer, which MaxText keeps.
inline constexpr uint64_t kHfShuffleBuffer = 1000;

// One epoch: the rows of files holding file_rows[0], file_rows[1], ... rows (numbered file after
// file from 0), in the order load_dataset(..., streaming=True).shuffle(seed=seed) of datasets
// `datasets_major`.x (4 or 5) hands them to MaxText's HFDataSource on host 0 of 1.
std::vector<uint64_t> hf_shuffled_rows(std::span<const uint64_t> file_rows, uint64_t seed,
                                       int datasets_major = 5, uint64_t buffer = kHfShuffleBuffer);

// The loader's order over epochs: epoch e is hf_shuffled_rows with seed + e (MaxText's
// num_epoch > 1: one shuffle per epoch with seeds data_shuffle_seed + i, concatenated). Rows that
// gave no document (row_document < 0: empty) are left out.
class HfShuffleOrder final : public DocumentOrder {
 public:
  HfShuffleOrder(std::vector<uint64_t> file_rows, std::vector<int64_t> row_document, uint64_t seed,
                 int datasets_major);
  uint64_t document(uint64_t position) const override;
  uint64_t epoch(uint64_t position) const override { return position / n_; }
  uint64_t documents() const override { return n_; }

 private:
  std::vector<uint64_t> file_rows_;
  std::vector<int64_t> row_document_;
  uint64_t seed_, n_ = 0;
  int datasets_major_;
  mutable uint64_t cached_epoch_ = ~uint64_t(0);
  mutable std::vector<uint64_t> cached_;  // that epoch's documents, in order
};

}  // namespace gemmax

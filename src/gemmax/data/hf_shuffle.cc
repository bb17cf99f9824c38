#include "gemmax/data/hf_shuffle.h"

#include <numeric>

#include "gemmax/base/error.h"
#include "gemmax/data/numpy_random.h"

namespace gemmax {

std::vector<uint64_t> hf_shuffled_rows(std::span<const uint64_t> file_rows, uint64_t seed,
                                       uint64_t buffer) {
  GEMMAX_CHECK(buffer > 0, "an HF shuffle buffer of 0 rows");
  std::vector<uint64_t> first(file_rows.size() + 1, 0);
  std::partial_sum(file_rows.begin(), file_rows.end(), first.begin() + 1);
  // The shards (one per file) are shuffled with a copy of default_rng(seed)...
  std::vector<uint64_t> files(file_rows.size());
  std::iota(files.begin(), files.end(), 0);
  NumpyRandom(seed).shuffle(std::span<uint64_t>(files));
  std::vector<uint64_t> out;
  out.reserve(first.back());
  std::vector<uint64_t> mem, kept;
  for (const uint64_t f : files) {
    // ...and HFDataSource reads them one by one, each through a buffer with a fresh copy of the
    // same untouched default_rng(seed). A full buffer is permuted; all but buffer / 2 rows of it
    // are handed on, the rest stay for the next fill. At the end the remainder is permuted whole.
    NumpyRandom rng(seed);
    mem.clear();
    const auto drain = [&](size_t keep) {
      const std::vector<uint64_t> p = rng.permutation(mem.size());
      const size_t give = mem.size() - keep;
      for (size_t i = 0; i < give; ++i) out.push_back(mem[p[i]]);
      kept.clear();
      for (size_t i = give; i < mem.size(); ++i) kept.push_back(mem[p[i]]);
      mem.swap(kept);
    };
    for (uint64_t r = first[f]; r < first[f + 1]; ++r) {
      mem.push_back(r);
      if (mem.size() >= buffer) drain(size_t(buffer / 2));
    }
    if (!mem.empty()) drain(0);
  }
  return out;
}

HfShuffleOrder::HfShuffleOrder(std::vector<uint64_t> file_rows, std::vector<int64_t> row_document,
                               uint64_t seed)
    : file_rows_(std::move(file_rows)), row_document_(std::move(row_document)), seed_(seed) {
  GEMMAX_CHECK(std::accumulate(file_rows_.begin(), file_rows_.end(), uint64_t(0)) ==
                   row_document_.size(),
               "HF order: ", row_document_.size(), " rows named, the files hold another count");
  for (const int64_t d : row_document_) n_ += d >= 0;
  GEMMAX_CHECK(n_ > 0, "a document order over no documents");
}

uint64_t HfShuffleOrder::document(uint64_t position) const {
  const uint64_t e = epoch(position);
  if (e != cached_epoch_) {
    cached_.clear();
    for (const uint64_t row : hf_shuffled_rows(file_rows_, seed_ + e))
      if (row_document_[row] >= 0) cached_.push_back(uint64_t(row_document_[row]));
    cached_epoch_ = e;
  }
  return cached_[position % n_];
}

}  // namespace gemmax

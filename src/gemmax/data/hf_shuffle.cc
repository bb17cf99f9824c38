#include "gemmax/data/hf_shuffle.h"

#include <numeric>

#include "gemmax/base/error.h"
#include "gemmax/data/numpy_random.h"

namespace gemmax {

namespace {

// datasets 5.x: a full buffer is permuted; all but buffer / 2 rows of it are handed on, the rest
// stay for the next fill. At the end the remainder is permuted whole.
void buffer_shuffle_5(uint64_t begin, uint64_t end, uint64_t seed, uint64_t buffer,
                      std::vector<uint64_t>& out) {
  NumpyRandom rng(seed);
  std::vector<uint64_t> mem, kept;
  const auto drain = [&](size_t keep) {
    const std::vector<uint64_t> p = rng.permutation(mem.size());
    const size_t give = mem.size() - keep;
    for (size_t i = 0; i < give; ++i) out.push_back(mem[p[i]]);
    kept.clear();
    for (size_t i = give; i < mem.size(); ++i) kept.push_back(mem[p[i]]);
    mem.swap(kept);
  };
  for (uint64_t r = begin; r < end; ++r) {
    mem.push_back(r);
    if (mem.size() >= buffer) drain(size_t(buffer / 2));
  }
  if (!mem.empty()) drain(0);
}

// datasets 4.x: once the buffer is full, each row takes the place of a drawn one, which is handed
// on; the indices are drawn 1000 at a time (rng.integers(0, buffer, size=1000)), so the draws
// the last rows left unused still move the generator before the remainder's rng.shuffle.
void buffer_shuffle_4(uint64_t begin, uint64_t end, uint64_t seed, uint64_t buffer,
                      std::vector<uint64_t>& out) {
  constexpr size_t kDrawBatch = 1000;
  NumpyRandom rng(seed);
  std::vector<uint64_t> mem;
  std::vector<int64_t> drawn;
  size_t next = 0;
  for (uint64_t r = begin; r < end; ++r) {
    if (mem.size() < buffer) {
      mem.push_back(r);
      continue;
    }
    if (next == drawn.size()) {
      drawn.resize(kDrawBatch);
      for (int64_t& i : drawn) i = rng.integers(0, int64_t(buffer));
      next = 0;
    }
    const size_t i = size_t(drawn[next++]);
    out.push_back(mem[i]);
    mem[i] = r;
  }
  rng.shuffle(std::span<uint64_t>(mem));
  out.insert(out.end(), mem.begin(), mem.end());
}

}  // namespace

std::vector<uint64_t> hf_shuffled_rows(std::span<const uint64_t> file_rows, uint64_t seed,
                                       int datasets_major, uint64_t buffer) {
  GEMMAX_CHECK(buffer > 0, "an HF shuffle buffer of 0 rows");
  GEMMAX_CHECK(datasets_major == 4 || datasets_major == 5, "datasets version ", datasets_major);
  std::vector<uint64_t> first(file_rows.size() + 1, 0);
  std::partial_sum(file_rows.begin(), file_rows.end(), first.begin() + 1);
  // The shards (one per file) are shuffled with a copy of default_rng(seed)...
  std::vector<uint64_t> files(file_rows.size());
  std::iota(files.begin(), files.end(), 0);
  NumpyRandom(seed).shuffle(std::span<uint64_t>(files));
  std::vector<uint64_t> out;
  out.reserve(first.back());
  // ...and HFDataSource reads them one by one, each through a buffer with a fresh copy of the
  // same untouched default_rng(seed).
  for (const uint64_t f : files)
    (datasets_major == 5 ? buffer_shuffle_5 : buffer_shuffle_4)(first[f], first[f + 1], seed,
                                                                buffer, out);
  return out;
}

HfShuffleOrder::HfShuffleOrder(std::vector<uint64_t> file_rows, std::vector<int64_t> row_document,
                               uint64_t seed, int datasets_major)
    : file_rows_(std::move(file_rows)),
      row_document_(std::move(row_document)),
      seed_(seed),
      datasets_major_(datasets_major) {
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
    for (const uint64_t row : hf_shuffled_rows(file_rows_, seed_ + e, datasets_major_))
      if (row_document_[row] >= 0) cached_.push_back(uint64_t(row_document_[row]));
    cached_epoch_ = e;
  }
  return cached_[position % n_];
}

}  // namespace gemmax

#include "gemmax/data/first_fit.h"

#include <algorithm>
#include <vector>

#include "gemmax/base/error.h"

namespace gemmax {

void pack_first_fit(const Documents& docs, const DocumentOrder& order, const FirstFitOptions& o,
                    StreamCursor& cur, int64_t first_row, Batch& b) {
  const int64_t S = b.seq;
  GEMMAX_CHECK(first_row >= 0 && first_row + b.batch <= o.bins, "rows ", first_row, "..",
               first_row + b.batch, " of a batch of ", o.bins);
  std::vector<int64_t> used(size_t(o.bins), 0);
  std::vector<int32_t> segments(size_t(o.bins), 0);
  const bool masked = !b.loss_mask.empty();
  while (true) {
    const uint64_t d = order.document(cur.position);
    const auto doc = docs[d];
    const int64_t piece = std::min<int64_t>(int64_t(doc.size() - cur.offset), S);
    const auto fits = [&](int64_t u) { return u + piece <= S; };
    const int64_t row = std::find_if(used.begin(), used.end(), fits) - used.begin();
    if (row == o.bins) break;  // fits no open row: it opens the next batch
    const int32_t segment = ++segments[size_t(row)];
    if (row >= first_row && row < first_row + b.batch) {
      const int64_t at = (row - first_row) * S + used[size_t(row)];
      const auto mask = masked ? docs.loss_mask(d) : std::span<const uint8_t>();
      for (int64_t i = 0; i < piece; ++i) {
        b.inputs[size_t(at + i)] = int32_t(doc[cur.offset + uint64_t(i)]);
        b.positions[size_t(at + i)] = int32_t(i);
        b.segment_ids[size_t(at + i)] = segment;
        if (masked) b.loss_mask[size_t(at + i)] = mask.empty() ? 1 : mask[cur.offset + uint64_t(i)];
      }
    }
    used[size_t(row)] += piece;
    cur.offset += uint64_t(piece);
    if (o.truncate || cur.offset == doc.size()) cur.position++, cur.offset = 0;
  }
  for (int64_t r = 0; r < b.batch; ++r) {
    for (int64_t c = used[size_t(first_row + r)]; c < S; ++c) {
      const size_t i = size_t(r * S + c);
      b.inputs[i] = o.pad_fill, b.positions[i] = 0, b.segment_ids[i] = 0;
      if (masked) b.loss_mask[i] = 0;
    }
  }
}

}  // namespace gemmax

// First-fit packing as MaxText configures grain's FirstFitPackIterDataset (docs/DATA.md): a
// batch's rows are open together, each piece goes to the first row with room, and the first
// piece that fits no row closes the batch and opens the next one.
#pragma once

#include <cstdint>

#include "gemmax/data/batch.h"
#include "gemmax/data/packing.h"
#include "gemmax/data/shuffle.h"

namespace gemmax {

// Where the stream stands: the next piece starts at token `offset` of the document at stream
// position `position` (DocumentOrder::document).
struct StreamCursor {
  uint64_t position = 0, offset = 0;
  bool operator==(const StreamCursor&) const = default;
};

struct FirstFitOptions {
  int64_t bins = 1;      // rows packed together: the global batch
  bool truncate = true;  // use_truncation: a document keeps its first seq tokens, the rest is
                         // dropped; false: it is cut into pieces of seq tokens, each placed alone
  int32_t pad_fill = 0;
};

// Packs the next batch of o.bins rows from `cur` on and advances `cur` past it; writes rows
// [first_row, first_row + b.batch) of it into b (inputs, positions, segment_ids, and loss_mask
// when the caller sized it), each piece with the next segment id of its row and positions from
// 0, the rest of each row padding.
void pack_first_fit(const Documents& docs, const DocumentOrder& order, const FirstFitOptions& o,
                    StreamCursor& cur, int64_t first_row, Batch& b);

}  // namespace gemmax

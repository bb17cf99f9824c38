// Packing documents into rows, MaxText style (docs/TRAINING.md §9): greedy, in order, segment ids
// per document, positions restarting per segment, targets shifted left within the row.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gemmax/data/batch.h"

namespace gemmax {

// The loader's data: token arrays, each split into documents after every eos token.
class Documents {
 public:
  // `owner` keeps the memory behind `tokens` alive (a mapped shard, a vector). Tokens after
  // the last eos form one more document. `loss_mask`: one 0/1 per token (a version-2 shard's), or
  // empty: every token counts.
  void add(std::span<const uint32_t> tokens, uint32_t eos_id,
           std::shared_ptr<const void> owner = nullptr, std::span<const uint8_t> loss_mask = {});
  uint64_t size() const { return starts_.size(); }  // documents
  uint64_t num_tokens() const { return num_tokens_; }
  std::span<const uint32_t> operator[](uint64_t doc) const;
  // The document's loss mask, or empty (every token counts).
  std::span<const uint8_t> loss_mask(uint64_t doc) const;
  bool has_loss_mask() const { return has_mask_; }

 private:
  struct Part {
    std::span<const uint32_t> tokens;
    std::span<const uint8_t> mask;
    uint64_t first_doc;
    std::shared_ptr<const void> owner;
  };
  std::vector<Part> parts_;
  std::vector<uint64_t> starts_;  // each document's first token, as an offset in its part
  uint64_t num_tokens_ = 0;
  bool has_mask_ = false;
  const Part& part_of(uint64_t doc, uint64_t* begin, uint64_t* end) const;
};

// Where the stream stands: the next piece to place starts at token `offset` of document `doc`.
struct PackCursor {
  uint64_t doc = 0, offset = 0, epoch = 0;
  bool operator==(const PackCursor&) const = default;
};

// Fills row `row` of `b` (inputs, positions, segment_ids, and loss_mask when the caller sized it;
// sized by the caller) from the cursor on and advances it; wraps to document 0 (epoch + 1) at the
// end. A document longer than the row is cut into pieces of at most b.seq tokens, each its own
// segment; a piece that does not fit the rest of the row starts the next row. packing=false: one
// piece per row. wrap=false (one pass, evaluation): nothing is placed once the cursor has wrapped,
// so the rest is padding. truncate (use_truncation): a document keeps only its first piece, the
// rest of it is dropped.
void pack_row(const Documents& docs, bool packing, int32_t pad_fill, PackCursor& cur, Batch& b,
              int64_t row, bool wrap = true, bool truncate = false);

// Advances the cursor past the row pack_row would fill (another rank's row of the global batch).
void skip_row(const Documents& docs, bool packing, PackCursor& cur, int64_t seq, bool wrap = true,
              bool truncate = false);

// targets = inputs shifted left within the row (last column: pad_fill); target_segment_ids the
// same shift of segment_ids, zeroed where the target is padding or the token pad_id (as MaxText
// does; pad_id < 0: the tokenizer has no pad, so no real token is dropped), and where the loss
// mask (if b.loss_mask is set) of the target token is 0.
void make_targets(Batch& b, int32_t pad_fill, int32_t pad_id);

}  // namespace gemmax

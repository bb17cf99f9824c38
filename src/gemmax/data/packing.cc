#include "gemmax/data/packing.h"

#include <algorithm>

#include "gemmax/base/error.h"

namespace gemmax {

void Documents::add(std::span<const uint32_t> tokens, uint32_t eos_id,
                    std::shared_ptr<const void> owner, std::span<const uint8_t> loss_mask) {
  if (tokens.empty()) return;
  GEMMAX_CHECK(loss_mask.empty() || loss_mask.size() == tokens.size(), "a loss mask of ",
               loss_mask.size(), " values for ", tokens.size(), " tokens");
  has_mask_ = has_mask_ || !loss_mask.empty();
  parts_.push_back({tokens, loss_mask, starts_.size(), std::move(owner)});
  uint64_t start = 0;
  for (uint64_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == eos_id) {
      starts_.push_back(start);
      start = i + 1;
    }
  }
  if (start < tokens.size()) starts_.push_back(start);
  num_tokens_ += tokens.size();
}

const Documents::Part& Documents::part_of(uint64_t doc, uint64_t* begin, uint64_t* end) const {
  GEMMAX_CHECK(doc < starts_.size(), "document ", doc, " of ", starts_.size());
  // The part holding `doc`: the last one whose first_doc <= doc.
  auto it = std::upper_bound(parts_.begin(), parts_.end(), doc,
                             [](uint64_t d, const Part& p) { return d < p.first_doc; });
  const Part& part = *(it - 1);
  const bool last_in_part =
      (it == parts_.end()) ? doc + 1 == starts_.size() : doc + 1 == it->first_doc;
  *begin = starts_[doc];
  *end = last_in_part ? part.tokens.size() : starts_[doc + 1];
  return part;
}

std::span<const uint32_t> Documents::operator[](uint64_t doc) const {
  uint64_t begin = 0, end = 0;
  return part_of(doc, &begin, &end).tokens.subspan(begin, end - begin);
}

std::span<const uint8_t> Documents::loss_mask(uint64_t doc) const {
  uint64_t begin = 0, end = 0;
  const Part& part = part_of(doc, &begin, &end);
  return part.mask.empty() ? part.mask : part.mask.subspan(begin, end - begin);
}

namespace {

// Takes the pieces of the next row from the cursor and advances it, calling place(col, doc,
// offset, piece, segment) for each piece; returns the columns filled.
template <class Place>
int64_t walk_row(const Documents& docs, bool packing, bool wrap, bool truncate, PackCursor& cur,
                 int64_t S, Place&& place) {
  GEMMAX_CHECK(docs.size() > 0, "packing a row: no documents");
  int64_t col = 0;
  int32_t segment = 0;
  while (col < S && (wrap || cur.epoch == 0)) {
    const auto doc = docs[cur.doc];
    const int64_t piece = std::min<int64_t>(int64_t(doc.size() - cur.offset), S);
    if (col + piece > S || (!packing && col > 0)) break;  // starts the next row
    place(col, doc, cur.offset, piece, ++segment);
    col += piece;
    cur.offset += uint64_t(piece);
    if (cur.offset == doc.size() || truncate) {
      cur.offset = 0;
      if (++cur.doc == docs.size()) cur.doc = 0, ++cur.epoch;
    }
  }
  return col;
}

}  // namespace

void pack_row(const Documents& docs, bool packing, int32_t pad_fill, PackCursor& cur, Batch& b,
              int64_t row, bool wrap, bool truncate) {
  const int64_t S = b.seq;
  int32_t* in = b.inputs.data() + row * S;
  int32_t* pos = b.positions.data() + row * S;
  int32_t* seg = b.segment_ids.data() + row * S;
  uint8_t* mask = b.loss_mask.empty() ? nullptr : b.loss_mask.data() + row * S;
  int64_t col = walk_row(docs, packing, wrap, truncate, cur, S,
                         [&](int64_t at, std::span<const uint32_t> doc, uint64_t offset,
                             int64_t piece, int32_t segment) {
                           const std::span<const uint8_t> m =
                               mask ? docs.loss_mask(cur.doc) : std::span<const uint8_t>();
                           for (int64_t i = 0; i < piece; ++i) {
                             in[at + i] = int32_t(doc[offset + i]);
                             pos[at + i] = int32_t(i);
                             seg[at + i] = segment;
                             if (mask) mask[at + i] = m.empty() ? 1 : m[offset + i];
                           }
                         });
  for (; col < S; ++col) {
    in[col] = pad_fill, pos[col] = 0, seg[col] = 0;
    if (mask) mask[col] = 0;
  }
}

void skip_row(const Documents& docs, bool packing, PackCursor& cur, int64_t seq, bool wrap,
              bool truncate) {
  walk_row(docs, packing, wrap, truncate, cur, seq,
           [](int64_t, std::span<const uint32_t>, uint64_t, int64_t, int32_t) {});
}

void make_targets(Batch& b, int32_t pad_fill, int32_t pad_id) {
  const int64_t S = b.seq;
  b.targets.resize(size_t(b.batch * S));
  b.target_segment_ids.resize(size_t(b.batch * S));
  for (int64_t r = 0; r < b.batch; ++r) {
    const int64_t o = r * S;
    for (int64_t c = 0; c < S; ++c) {
      const bool last = c + 1 == S;
      const int32_t t = last ? pad_fill : b.inputs[o + c + 1];
      const int32_t ts =
          last || (!b.loss_mask.empty() && b.loss_mask[o + c + 1] == 0) ? 0 : b.segment_ids[o + c + 1];
      b.targets[o + c] = t;
      b.target_segment_ids[o + c] = (pad_id >= 0 && t == pad_id) ? 0 : ts;
    }
  }
}

}  // namespace gemmax

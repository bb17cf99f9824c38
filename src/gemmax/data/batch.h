// One training batch in MaxText's packed layout: rows of `seq` tokens, each row holding one or
// more documents told apart by segment ids.
#pragma once

#include <cstdint>
#include <vector>

namespace gemmax {

struct Batch {
  int64_t batch = 0;  // rows (B)
  int64_t seq = 0;    // tokens per row (S)
  // Each [B * S], row-major.
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;              // inputs shifted left by one
  std::vector<int32_t> positions;            // restart at 0 in each segment; RoPE uses them
  std::vector<int32_t> segment_ids;          // 1, 2, ... per document in the row; 0 = padding
  std::vector<int32_t> target_segment_ids;   // segment of the target; 0 = not counted in the loss
  // Per input token, 1 where it counts as a target (sft_train_on_completion_only); empty: all do.
  // make_targets folds it into target_segment_ids.
  std::vector<uint8_t> loss_mask;

  int64_t tokens() const { return batch * seq; }
  int64_t num_target_tokens() const {
    int64_t n = 0;
    for (int32_t s : target_segment_ids) n += (s != 0);
    return n;
  }
};

}  // namespace gemmax

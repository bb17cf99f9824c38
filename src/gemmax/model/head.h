// The output head and loss (docs/MODEL.md §2, §4.8; docs/TRAINING.md §8, §9):
//   logits = cap * tanh( RMSNorm(x; norm) . Emb^T / cap ),  loss = masked mean cross-entropy.
//
// Vocabulary tiling (num_vocab_tiling = N). The head runs over N tiles of token positions taken
// along the sequence axis: tile t holds positions [t S/N, (t+1) S/N) of every one of the B rows,
// C = B S / N tokens (seed change 5, vocabulary tiling along the sequence,
// docs/SEED.md#each-change: each device tiles its own, unsharded sequence, so no tile needs tokens
// of another device). At most one [C, V] logits tile exists at any moment; no buffer of [tokens,
// vocab] is ever built.
//
// Each tile's loss gradient is formed right after its loss, in the same pass. MaxText's custom
// VJP saves only the head's inputs and recomputes every tile's logits in a second pass
// (4 head matmuls per tile); here the head is the last op of the step and the cotangent of its
// output (the loss) is known before it runs: 1 / (number of counted targets), fixed by the
// batch. Forming the gradient in the forward pass gives the same result with 3 matmuls per
// tile, the same one-tile memory bound, and one pass over the (FSDP-gathered) table instead of
// two. Gradient accumulation keeps it: each microbatch scales by the total target count.
#pragma once

#include <vector>

#include "gemmax/model/context.h"

namespace gemmax {

// Tile `tile` of the tokens as contiguous blocks of the flattened [B*S] token axis: positions
// [tile Cs, (tile+1) Cs) of each row b (Cs = S / num_tiles) go to tile rows [b Cs, (b+1) Cs). One
// block when the tile is contiguous anyway (one row, or one tile).
struct TileBlock {
  int64_t token, row, count;  // x rows [token, token + count) -> tile rows [row, row + count)
};
std::vector<TileBlock> tile_blocks(int64_t B, int64_t S, int64_t num_tiles, int64_t tile);

struct HeadWeights {
  Tensor embed;       // [V, D] (tied; the compute-dtype copy)
  Tensor final_norm;  // [D]
};

// Adds the sum over counted targets of the cross-entropy into `loss` (a float64 device scalar).
// With dx: dx (written) is the gradient w.r.t. x of grad_scale * that sum, and with g the
// embedding / final-norm gradients accumulate into it (a frozen head passes none). num_tiles must
// divide in.seq.
void head_loss(Backend& be, const ModelConfig& cfg, const StepInputs& in, const ModelOptions& opt,
               const HeadWeights& w, const Tensor& x, double grad_scale, const Tensor& loss,
               const HeadWeights* g, const Tensor* dx);

// The soft-capped logits of every position, [T, V] (for checks and sampling, not training).
Tensor head_logits(Backend& be, const ModelConfig& cfg, const ModelOptions& opt,
                   const HeadWeights& w, const Tensor& x);

}  // namespace gemmax

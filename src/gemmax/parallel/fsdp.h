// Fully sharded data parallelism (ZeRO-3) over a Comm: docs/FSDP.md.
//
// Each rank holds 1/N of every large parameter's fp32 master weights, gradients and Adam moments
// (parallel/shard_layout.h) and trains on its own per_device_batch_size rows of the global batch.
// FsdpParams is the StepParams of such a rank (model/step_params.h):
//   - before a layer's forward, and again before its backward (whose remat recompute uses the same
//     weights), it casts its piece of the layer's matrices to the compute dtype and all-gathers the
//     layer; the gathers of the next `prefetch` layers are started before waiting for this one, so
//     they move while this layer computes;
//   - a layer's backward accumulates full-shape fp32 gradients, reduce-scattered (summed) into the
//     ranks' gradient pieces as soon as the layer is done, while the next layer's backward runs (at
//     most `prefetch` + 1 layers' full gradients exist at once);
//   - replicated small vectors (seed change 1, small vectors replicated:
//     docs/FSDP.md#the-seeds-sharding-choices) are used from the local copy, never gathered;
//     their gradients are all-reduced once, after the backward;
//   - the embedding table is sharded along the vocabulary (seed change 3, the embedding sharded
//     along the vocabulary: docs/FSDP.md#the-seeds-sharding-choices). Either it is gathered
//     for the lookup and for the head (fsdp_embedding=gather), or nothing of it moves
//     (vocab_parallel): the lookup and the tied, soft-capped head run on each rank's vocabulary
//     rows for the tokens of all ranks, tile by tile along the sequence (seed change 5, vocabulary
//     tiling along the sequence: docs/SEED.md#each-change), with the head's log-sum-exp combined
//     across ranks (parallel/vocab_parallel.h);
//   - vocab_tiling_axis=batch (seed change 5, vocabulary tiling along the sequence, turned off)
//     tiles the head along the global batch's rows instead, each tile's input spread over the
//     ranks and its gradient returned by all-to-alls (HeadChunks);
//   - the optimizer updates only the local pieces, with the global gradient norm.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "gemmax/config/train_config.h"
#include "gemmax/model/step_params.h"
#include "gemmax/parallel/comm.h"
#include "gemmax/parallel/shard_layout.h"

namespace gemmax {

enum class EmbeddingMode : uint8_t { Gather, VocabParallel };
const char* embedding_mode_name(EmbeddingMode m);

struct FsdpOptions {
  // fsdp_replicate_small_params: seed change 1, small vectors replicated
  // (docs/FSDP.md#the-seeds-sharding-choices).
  bool replicate_small = true;
  EmbeddingMode embedding = EmbeddingMode::Gather;  // fsdp_embedding, resolved
  int prefetch = 1;                                 // fsdp_prefetch_layers; 0: no overlap
  // vocab_tiling_axis=batch (seed change 5, vocabulary tiling along the sequence, turned off:
  // docs/SEED.md#each-change): the head's tiles are num_vocab_tiling slices of the global batch's
  // rows, each spread over the ranks by all-to-alls (HeadChunks).
  bool tile_batch = false;
  std::string embedding_choice;  // why `embedding` was chosen (auto), for the log
};

// Whether a step gathers every rank's tokens, targets and target masks (upload_sharded_batch):
// the vocabulary-parallel lookup and head need them, and so do head tiles along the global batch.
inline bool gathers_batch_tokens(const FsdpOptions& o, int64_t ranks) {
  return ranks > 1 && (o.embedding == EmbeddingMode::VocabParallel || o.tile_batch);
}

// The payload bytes the embedding and head move per step in each mode (docs/FSDP.md), from which
// fsdp_embedding=auto picks the smaller.
struct EmbeddingBytes {
  int64_t gather = 0, vocab_parallel = 0;
};
EmbeddingBytes embedding_bytes(const ModelConfig& cfg, int64_t ranks, int64_t batch, int64_t seq,
                               DType act, DType weight);

// Checks fsdp_replicate_small_params, fsdp_embedding, fsdp_prefetch_layers and vocab_tiling_axis
// (with `tiles`, num_vocab_tiling); resolves auto.
FsdpOptions fsdp_options(const ParallelConfig& config, int64_t tiles, const ModelConfig& cfg,
                         int64_t ranks, int64_t batch, int64_t seq, DType act, DType weight);

// What the vocabulary-parallel lookup and head read of the global batch: for every tile of the
// sequence and every rank, that rank's C rows of the tile (rank after rank), as seen by this
// rank's vocabulary rows [v0, v0 + rows): int32 [tiles * ranks * C] each.
// With vocab_tiling_axis=batch the head's targets and mask are those of the ranks' chunks of each
// head tile (HeadChunks), in the same layout; the lookup's tokens stay tiled along the sequence.
struct VocabInputs {
  Tensor tokens;   // token - v0 if this rank holds it, else `rows` (a zero row of the lookup)
  Tensor targets;  // target - v0 if this rank holds it, else -1
  Tensor mask;     // 1 where the target counts in the loss
  // vocab_tiling_axis=batch with the table gathered: the targets (vocabulary ids) and the target
  // mask of this rank's chunk of each head tile, int32 [tiles * C].
  Tensor chunk_targets, chunk_mask;
};
VocabInputs alloc_vocab_inputs(Backend& be, int64_t ranks, int64_t tokens_per_rank);

// vocab_tiling_axis=batch: head tile t is rows [t Bt, (t+1) Bt) of the global batch (Bt = N B /
// tiles; rank q holds rows [q B, (q+1) B)), its Bt S tokens cut into N chunks of C = B S / tiles,
// chunk r processed by rank r. Per tile, this rank sends its tokens of the tile (local tokens
// [first, first + sum(send))) to the chunks' ranks, send[r] to rank r, and receives its chunk,
// recv[q] tokens from rank q, in order; the gradient goes back the other way.
struct HeadChunks {
  int64_t C = 0;
  std::vector<int64_t> first;
  std::vector<std::vector<int64_t>> send, recv;
};
HeadChunks head_chunks(int64_t ranks, int64_t rank, int64_t batch, int64_t seq, int64_t tiles);
// Global token g (rank-major rows, then positions) of chunk token i of rank r in tile t.
int64_t head_chunk_token(const HeadChunks& h, int64_t ranks, int64_t tile, int64_t r, int64_t i);

// The batch of this rank on the device, with what the step needs of the other ranks' batches
// (gathered over `comm`): the global target count, and for vocab_parallel the VocabInputs.
struct ShardedBatch {
  StepInputs in;
  VocabInputs vocab;
};
ShardedBatch upload_sharded_batch(Backend& be, Comm& comm, const ShardLayout& layout,
                                  const FsdpOptions& opt, int64_t num_tiles, int64_t vocab_size,
                                  const Batch& batch);
// The same buffers, uninitialised (the memory plan).
ShardedBatch alloc_sharded_batch(Backend& be, const ShardLayout& layout, const FsdpOptions& opt,
                                 int64_t batch, int64_t seq);

class FsdpParams final : public StepParams {
 public:
  // weights, grads: this rank's flat buffers (layout.local_total, the weight dtype). `backward`:
  // a backward follows the forward (the layers are gathered again for it); false: forward only
  // (evaluation). Undefined grads with a backward: the weights are frozen (a LoRA run's base),
  // gathered as ever and never reduce-scattered.
  FsdpParams(Backend& be, Comm& comm, const ParamTable& table, const ShardLayout& layout,
             const FsdpOptions& opt, const ModelOptions& model, const Tensor& weights,
             const Tensor& grads, const VocabInputs& vocab, bool backward);

  Tensor embed(const StepInputs& in) override;
  LayerWeights layer(int64_t l, Pass pass) override;
  LayerWeights layer_grads(int64_t l) override;
  void layer_done(int64_t l, Pass pass) override;
  void head(const StepInputs& in, const Tensor& x, double grad_scale, const Tensor& loss,
            const Tensor& dx) override;
  void embed_backward(const StepInputs& in, const Tensor& dx) override;

  // After forward_backward: completes the reduce-scatters (every sharded gradient piece is then
  // final) and starts the all-reduce of the replicated gradients, returned for the caller to wait.
  CommRequest finish_gradients();

 private:
  // The gathers of one step stage: the step's stages in order are the lookup, the forward of each
  // layer, the head, and the backward of each layer (last to first).
  struct Gathered {
    std::vector<int> groups;
    std::vector<DType> dtypes;
    std::string what;
    std::vector<Tensor> full;  // per group: the gathered buffer
    std::vector<CommRequest> requests;
    bool started = false, ready = false;
  };
  size_t stage(int64_t layer, Pass pass) const;
  void start(size_t s);
  // Starts stage s (and the next `prefetch` ones) and waits for s.
  Gathered& ready(size_t s);
  void release(size_t s);
  ParamLocation locate(const ParamSpec& spec, const Gathered& g, const Tensor& local) const;
  size_t spec_index(const ParamSpec& s) const { return size_t(&s - table_.specs().data()); }
  Tensor local_piece(const Tensor& buf, int group) const;
  // Gradients: the full-shape buffers of the groups being reduce-scattered.
  void scatter(std::vector<std::pair<int, Tensor>> full, const std::string& what);
  void bound_scatters(size_t in_flight);

  Backend& be_;
  Comm& comm_;
  const ParamTable& table_;
  const ShardLayout& layout_;
  FsdpOptions opt_;
  ModelOptions model_;
  Tensor weights_, grads_;
  VocabInputs vocab_;
  std::vector<int> group_of_;  // per registry entry: its group, or -1 (replicated)
  std::vector<Gathered> stages_;
  std::vector<std::pair<int, Tensor>> layer_grads_;  // the layer being back-propagated
  std::deque<std::vector<CommRequest>> scatters_;    // in flight, oldest first
  Tensor lookup_grad_;  // the lookup's share of the table gradient, added at the end
};

}  // namespace gemmax

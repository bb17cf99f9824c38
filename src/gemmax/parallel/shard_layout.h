// Which elements of each parameter a rank holds, and where they live in its flat buffers.
//
// The weights, gradients and Adam moments of a rank are flat buffers with one layout. On one
// device (whole) every parameter is whole, at its registry offset. Under FSDP over N ranks
// (fsdp) a rank's buffers hold, back to back:
//   the replicated parameters, whole, in registry order (the small vectors: seed change 1, small
//   vectors replicated, docs/FSDP.md#the-seeds-sharding-choices); its piece of each shard group, in
//   step order: the embedding table, then for each layer its matrices (and its small vectors when
//   they are not replicated), then the final norm (when not replicated).
// A shard group is a set of parameters laid back to back as one flat buffer of `full` elements,
// zero-padded to N equal pieces; rank r holds piece r. One collective gathers a group (into the
// full buffer, where each parameter sits at its group offset) and one reduce-scatters its
// gradient. The embedding's pieces are whole rows of the vocabulary (seed change 3, the embedding
// sharded along the vocabulary: docs/FSDP.md#the-seeds-sharding-choices).
//
// Everything here follows from the registry (model/params.h, ParamSpec::fsdp) and three numbers:
// the rank count, the rank, and whether small vectors are replicated. The memory plan, the
// sharded step and the checkpoints all read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemmax/model/params.h"

namespace gemmax {

// Where one parameter's local elements are: elements [begin, begin + count) of the flattened
// parameter at [local, local + count) of the rank's buffers (count 0: none on this rank).
struct ParamPiece {
  int64_t begin = 0, count = 0;
  int64_t local = 0;
  bool replicated = false;  // every rank holds it whole; its gradient is all-reduced
};

struct ShardGroup {
  std::string name;             // "layer 3", "layer 3 vectors", "embedding", "final norm"
  int64_t layer = -1;           // the decoder layer, or -1
  bool vectors = false;         // small vectors: gathered in their own dtype, not cast
  std::vector<size_t> params;   // indices into the registry, in its order
  std::vector<int64_t> offset;  // each parameter's place in the group's full buffer
  int64_t full = 0;             // elements of the group
  int64_t piece = 0;            // elements each rank holds (piece * ranks >= full)
  int64_t local = 0;            // where this rank's piece starts in its buffers
};

struct ShardLayout {
  int ranks = 1, rank = 0;
  bool replicate_small = true;
  int64_t local_total = 0;         // elements of the rank's weight (and gradient) buffer
  int64_t replicated = 0;          // [0, replicated) holds the replicated parameters
  std::vector<ParamPiece> pieces;  // one per registry entry
  std::vector<ShardGroup> groups;  // empty on one device
  // Group indices: the embedding, the final norm (-1: replicated), each layer's matrices and
  // vectors (-1: replicated).
  int embedding = -1, final_norm = -1;
  std::vector<int> layer_matrices, layer_vectors;

  bool sharded() const { return !groups.empty(); }
  // The most elements of trained parameters any rank holds (the size of every rank's Adam moments,
  // so that all ranks allocate alike and one rank's plan is every rank's).
  int64_t max_trained(const ParamTable& table, const std::vector<bool>& trainable) const;
  // Every parameter whole at its registry offset (one device).
  static ShardLayout whole(const ParamTable& table);
  // Rank `rank`'s share of an FSDP run over `ranks` ranks.
  static ShardLayout fsdp(const ParamTable& table, int ranks, int rank, bool replicate_small);
};

}  // namespace gemmax

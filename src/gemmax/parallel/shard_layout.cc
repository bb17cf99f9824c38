#include "gemmax/parallel/shard_layout.h"

#include <algorithm>

#include "gemmax/base/error.h"

namespace gemmax {

ShardLayout ShardLayout::whole(const ParamTable& table) {
  ShardLayout l;
  l.local_total = table.total();
  for (const ParamSpec& s : table.specs()) l.pieces.push_back({0, s.numel(), s.offset, false});
  return l;
}

ShardLayout ShardLayout::fsdp(const ParamTable& table, int ranks, int rank, bool replicate_small) {
  GEMMAX_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank ", rank, " of ", ranks);
  const ModelConfig& c = table.config();
  const std::vector<ParamSpec>& specs = table.specs();
  ShardLayout l;
  l.ranks = ranks;
  l.rank = rank;
  l.replicate_small = replicate_small;
  l.pieces.resize(specs.size());
  l.layer_matrices.assign(size_t(c.num_layers), -1);
  l.layer_vectors.assign(size_t(c.num_layers), -1);

  // Replicated parameters first.
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].fsdp != FsdpRole::SmallVector || !replicate_small) continue;
    l.pieces[i] = {0, specs[i].numel(), l.replicated, true};
    l.replicated += specs[i].numel();
  }
  int64_t at = l.replicated;

  // Then the groups, each a flat buffer cut into `ranks` equal pieces of whole rows.
  auto add_group = [&](std::string name, int64_t layer, bool vectors, std::vector<size_t> params,
                       int64_t row) {
    ShardGroup g;
    g.name = std::move(name);
    g.layer = layer;
    g.vectors = vectors;
    g.params = std::move(params);
    for (size_t i : g.params) {
      g.offset.push_back(g.full);
      g.full += specs[i].numel();
    }
    const int64_t rows = (g.full / row + ranks - 1) / ranks;
    g.piece = rows * row;
    g.local = at;
    at += g.piece;
    // This rank's piece covers [rank * piece, (rank + 1) * piece) of the group.
    const int64_t lo = int64_t(rank) * g.piece, hi = lo + g.piece;
    for (size_t k = 0; k < g.params.size(); ++k) {
      const int64_t b = std::max(lo, g.offset[k]);
      const int64_t e = std::min(hi, g.offset[k] + specs[g.params[k]].numel());
      ParamPiece& p = l.pieces[g.params[k]];
      p = {b - g.offset[k], std::max<int64_t>(0, e - b), g.local + (b - lo), false};
      if (p.count == 0) p.begin = 0, p.local = g.local;
    }
    l.groups.push_back(std::move(g));
    return int(l.groups.size()) - 1;
  };

  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].fsdp == FsdpRole::VocabRows)
      l.embedding = add_group("embedding", -1, false, {i}, specs[i].shape[1]);
  GEMMAX_CHECK(l.embedding >= 0, "the registry has no vocabulary-sharded embedding");
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    std::vector<size_t> matrices, vectors;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].layer != layer) continue;
      if (specs[i].fsdp == FsdpRole::LayerMatrix) matrices.push_back(i);
      if (specs[i].fsdp == FsdpRole::SmallVector && !replicate_small) vectors.push_back(i);
    }
    l.layer_matrices[size_t(layer)] =
        add_group("layer " + std::to_string(layer), layer, false, matrices, 1);
    if (!vectors.empty())
      l.layer_vectors[size_t(layer)] =
          add_group("layer " + std::to_string(layer) + " vectors", layer, true, vectors, 1);
  }
  if (!replicate_small) {
    std::vector<size_t> rest;
    for (size_t i = 0; i < specs.size(); ++i)
      if (specs[i].layer < 0 && specs[i].fsdp == FsdpRole::SmallVector) rest.push_back(i);
    l.final_norm = add_group("final norm", -1, true, rest, 1);
  }
  l.local_total = at;
  return l;
}

int64_t ShardLayout::max_trained(const ParamTable& table,
                                 const std::vector<bool>& trainable) const {
  int64_t replicated_trained = 0;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (trainable[i] && (pieces[i].replicated || !sharded())) replicated_trained += pieces[i].count;
  int64_t best = 0;
  for (int r = 0; r < ranks && sharded(); ++r) {
    int64_t n = 0;
    for (const ShardGroup& g : groups) {
      const int64_t lo = int64_t(r) * g.piece, hi = lo + g.piece;
      for (size_t k = 0; k < g.params.size(); ++k) {
        const int64_t end = g.offset[k] + table.specs()[g.params[k]].numel();
        if (trainable[g.params[k]])
          n += std::max<int64_t>(0, std::min(hi, end) - std::max(lo, g.offset[k]));
      }
    }
    best = std::max(best, n);
  }
  return replicated_trained + best;
}

}  // namespace gemmax

#include "gemmax/parallel/vocab_parallel.h"

#include <cmath>
#include <optional>

#include "gemmax/model/head.h"

namespace gemmax {
namespace {

struct Tiles {
  int64_t ranks, count, C;  // C: each rank's tokens per tile
};

Tiles tiles_of(const Comm& comm, const StepInputs& in, const ModelOptions& opt) {
  const int64_t n = opt.num_vocab_tiling;
  GEMMAX_CHECK(n > 0 && in.seq % n == 0, "num_vocab_tiling=", n,
               " must divide max_target_length=", in.seq);
  return {comm.size(), n, in.batch * in.seq / n};
}

Tensor tile_slice(const Tensor& t, const Tiles& k, int64_t tile) {
  return t.flat_slice(tile * k.ranks * k.C, {k.ranks * k.C});
}

}  // namespace

VocabSlice vocab_slice(int64_t vocab_size, int64_t ranks, int64_t rank) {
  VocabSlice s;
  s.piece = (vocab_size + ranks - 1) / ranks;
  s.first = rank * s.piece;
  s.rows = std::max<int64_t>(0, std::min(s.piece, vocab_size - s.first));
  return s;
}

void vocab_parallel_embed(Backend& be, Comm& comm, const ModelConfig& cfg, const ModelOptions& opt,
                          const StepInputs& in, const VocabInputs& vocab, const Tensor& table,
                          const Tensor& x) {
  const Tiles k = tiles_of(comm, in, opt);
  const int64_t D = cfg.d_model, piece = table.dim(0);
  // The rank's rows and a zero row, which the tokens of other ranks' rows look up.
  Tensor rows = be.alloc({piece + 1, D}, table.dtype(), MemKind::Workspace);
  be.copy({.dst = rows.rows(0, piece), .src = table});
  be.fill({.x = rows.rows(piece, piece + 1), .value = 0.0});
  struct Pending {
    CommRequest request;
    Tensor mine;
    int64_t tile;
  };
  std::optional<Pending> prev;
  auto finish = [&](Pending& p) {
    p.request.wait();
    for (const TileBlock& b : tile_blocks(in.batch, in.seq, k.count, p.tile))
      be.copy(
          {.dst = x.rows(b.token, b.token + b.count), .src = p.mine.rows(b.row, b.row + b.count)});
  };
  for (int64_t t = 0; t < k.count; ++t) {
    Tensor partial = be.alloc({k.ranks * k.C, D}, x.dtype(), MemKind::Workspace);
    be.embedding_forward({.x = partial,
                          .tokens = tile_slice(vocab.tokens, k, t),
                          .table = rows,
                          .scale = std::sqrt(double(D))});
    Tensor mine = be.alloc({k.C, D}, x.dtype(), MemKind::Workspace);
    CommRequest r = comm.reduce_scatter(partial, mine, str_cat("the embedding lookup, tile ", t));
    partial = Tensor();
    if (prev) finish(*prev);  // the previous tile's sum moved while this tile was looked up
    prev = Pending{std::move(r), mine, t};
  }
  if (prev) finish(*prev);
}

void vocab_parallel_embed_backward(Backend& be, Comm& comm, const ModelConfig& cfg,
                                   const ModelOptions& opt, const StepInputs& in,
                                   const VocabInputs& vocab, const Tensor& dx,
                                   const Tensor& dtable) {
  const Tiles k = tiles_of(comm, in, opt);
  const int64_t D = cfg.d_model, piece = dtable.dim(0);
  Tensor grad = be.zeros({piece + 1, D}, dtable.dtype(), MemKind::Workspace);
  auto gather = [&](int64_t t) {
    Tensor mine = be.alloc({k.C, D}, dx.dtype(), MemKind::Workspace);
    for (const TileBlock& b : tile_blocks(in.batch, in.seq, k.count, t))
      be.copy(
          {.dst = mine.rows(b.row, b.row + b.count), .src = dx.rows(b.token, b.token + b.count)});
    Tensor all = be.alloc({k.ranks * k.C, D}, dx.dtype(), MemKind::Workspace);
    CommRequest r = comm.all_gather(mine, all, str_cat("the embedding gradient, tile ", t));
    return std::make_pair(std::move(r), all);
  };
  auto next = gather(0);
  for (int64_t t = 0; t < k.count; ++t) {
    auto cur = std::move(next);
    if (t + 1 < k.count) next = gather(t + 1);  // in flight while this tile is added
    cur.first.wait();
    be.embedding_backward({.dtable = grad,
                           .dx = cur.second,
                           .tokens = tile_slice(vocab.tokens, k, t),
                           .scale = std::sqrt(double(D))});
  }
  be.axpy({.y = dtable, .alpha = 1.0, .x = grad.rows(0, piece)});
}

void vocab_parallel_head(Backend& be, Comm& comm, const ModelConfig& cfg, const ModelOptions& opt,
                         const StepInputs& in, const VocabInputs& vocab, const Tensor& table,
                         const Tensor& final_norm, const Tensor& x, double grad_scale,
                         const Tensor& loss, const Tensor& dtable, const Tensor& dnorm,
                         const Tensor& dx) {
  const Tiles k = tiles_of(comm, in, opt);
  const int64_t D = cfg.d_model, R = k.ranks * k.C, rows = table.dim(0);
  // Buffers are sized by the rows a rank stores, not the real ones (fewer on the last rank), so
  // that every rank allocates alike.
  const int64_t piece = vocab_slice(cfg.vocab_size, comm.size(), comm.rank()).piece;
  const DType act = opt.act, dot = head_dot_dtype(opt);
  GEMMAX_CHECK(table.dtype() == dot, "the head's table is ", table.str(), ", its product runs in ",
               dtype_name(dot));
  // dy's partial sums over each rank's columns are added across ranks in fp32 (fp64 runs: fp64)
  // and rounded once, as one device's matmul accumulates them.
  const DType acc = act == DType::F64 ? DType::F64 : DType::F32;
  const bool backward = dx.defined();  // else the loss alone (evaluation); a frozen table
                                       // (a LoRA run's) has no dtable
  Tensor y = be.alloc({k.C, D}, act, MemKind::Workspace);
  Tensor rstd = be.alloc({k.C}, stat_dtype(act), MemKind::Workspace);
  Tensor y_all = be.alloc({R, D}, act, MemKind::Workspace);
  // logits_dot_in_fp32: the gathered input widened once per tile for the product.
  Tensor y_dot = dot == act ? y_all : be.alloc({R, D}, dot, MemKind::Workspace);
  Tensor logits = be.alloc({R * piece}, dot, MemKind::Workspace).flat_slice(0, {R, rows});
  Tensor stats = be.alloc({3, R}, DType::F64, MemKind::Workspace);
  Tensor dy_all, dy_acc, dy;
  if (backward) {
    dy_all = be.alloc({R, D}, acc, MemKind::Workspace);
    dy_acc = be.alloc({k.C, D}, acc, MemKind::Workspace);
    dy = acc == act ? dy_acc : be.alloc({k.C, D}, act, MemKind::Workspace);
  }
  const double cap = cfg.final_logits_soft_cap;
  const int64_t mine = comm.rank() * k.C;  // this rank's rows of a gathered tile
  for (int64_t t = 0; t < k.count; ++t) {
    const std::vector<TileBlock> blocks = tile_blocks(in.batch, in.seq, k.count, t);
    for (const TileBlock& b : blocks)
      be.rmsnorm_forward({.y = y.rows(b.row, b.row + b.count),
                          .rstd = rstd.rows(b.row, b.row + b.count),
                          .x = x.rows(b.token, b.token + b.count),
                          .w = final_norm,
                          .eps = cfg.norm_eps,
                          .out_scale = 1.0,
                          .round_before_scale = !opt.norm_scale_in_fp32});
    comm.all_gather(y, y_all, str_cat("the head's activations, tile ", t)).wait();
    const Tensor targets = tile_slice(vocab.targets, k, t);
    if (dot != act) be.copy({.dst = y_dot, .src = y_all});
    be.matmul({.c = logits,
               .a = y_dot,
               .trans_a = false,
               .b = table,
               .trans_b = true,
               .accumulate = false});
    be.vocab_ce_max({.logits = logits, .stats = stats, .cap = cap});
    comm.all_reduce(stats.rows(0, 1), ReduceOp::Max, str_cat("the logits' maxima, tile ", t))
        .wait();
    be.vocab_ce_sums({.logits = logits, .stats = stats, .targets = targets});
    comm.all_reduce(stats.rows(1, 3), ReduceOp::Sum, str_cat("the softmax sums, tile ", t)).wait();
    be.vocab_ce_finish({.logits = logits,
                        .loss = loss,
                        .stats = stats,
                        .targets = targets,
                        .mask = tile_slice(vocab.mask, k, t),
                        .cap = cap,
                        .grad_scale = grad_scale,
                        .loss_begin = mine,
                        .loss_end = mine + k.C,
                        .write_grad = backward});
    if (!backward) continue;
    // logits now holds dz for the tile's rows of every rank, over this rank's columns.
    if (dtable.defined())
      be.matmul({.c = dtable,
                 .a = logits,
                 .trans_a = true,
                 .b = y_dot,
                 .trans_b = false,
                 .accumulate = true});
    be.matmul({.c = dy_all,
               .a = logits,
               .trans_a = false,
               .b = table,
               .trans_b = false,
               .accumulate = false});
    comm.reduce_scatter(dy_all, dy_acc, str_cat("the head's input gradient, tile ", t)).wait();
    if (dy.dtype() != acc) be.copy({.dst = dy, .src = dy_acc});
    for (const TileBlock& b : blocks)
      be.rmsnorm_backward({.dx = dx.rows(b.token, b.token + b.count),
                           .dw = dnorm,
                           .dy = dy.rows(b.row, b.row + b.count),
                           .x = x.rows(b.token, b.token + b.count),
                           .w = final_norm,
                           .rstd = rstd.rows(b.row, b.row + b.count),
                           .out_scale = 1.0,
                           .accumulate_dx = false});
  }
}

}  // namespace gemmax

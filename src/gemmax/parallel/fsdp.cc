#include "gemmax/parallel/fsdp.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "gemmax/base/strings.h"
#include "gemmax/model/head.h"
#include "gemmax/parallel/vocab_parallel.h"

namespace gemmax {

const char* embedding_mode_name(EmbeddingMode m) {
  return m == EmbeddingMode::Gather ? "gather" : "vocab_parallel";
}

EmbeddingBytes embedding_bytes(const ModelConfig& c, int64_t ranks, int64_t batch, int64_t seq,
                               DType act, DType weight) {
  const int64_t D = c.d_model, piece = (c.vocab_size + ranks - 1) / ranks;
  const int64_t table = ranks * piece * D;  // the padded table's elements
  const int64_t a = int64_t(dtype_size(act)), w = int64_t(dtype_size(weight));
  const int64_t acc = act == DType::F64 ? 8 : 4;
  EmbeddingBytes b;
  // Gathered for the lookup (in the weight dtype, as one device looks it up) and for the head (in
  // the compute dtype); its two gradients reduce-scattered in the weight dtype.
  b.gather = table * (w + a + 2 * w);
  // Per token of the global batch: the lookup's reduce-scatter, the head's all-gather of its input
  // and reduce-scatter of that input's gradient, the lookup gradient's all-gather; per token also
  // three float64 softmax statistics, and the three int32 arrays of the global batch. (The tiles
  // split the same bytes into more collectives.)
  const int64_t tokens = ranks * batch * seq;
  b.vocab_parallel = tokens * (D * (a + a + acc + a) + 3 * 8 + 3 * 4);
  return b;
}

FsdpOptions fsdp_options(const ParallelConfig& config, int64_t tiles, const ModelConfig& cfg,
                         int64_t ranks, int64_t batch, int64_t seq, DType act, DType weight) {
  FsdpOptions o;
  o.replicate_small = config.fsdp_replicate_small_params;
  const int64_t prefetch = config.fsdp_prefetch_layers;
  if (prefetch < 0 || prefetch > 8)
    fail("fsdp_prefetch_layers=", prefetch,
         " must be in [0, 8]: the layers whose all-gather is in flight while a layer computes "
         "(0: none, no overlap)");
  o.prefetch = int(prefetch);
  const EmbeddingBytes b = embedding_bytes(cfg, ranks, batch, seq, act, weight);
  switch (config.fsdp_embedding) {
    case FsdpEmbedding::Gather: o.embedding = EmbeddingMode::Gather; break;
    case FsdpEmbedding::VocabParallel: o.embedding = EmbeddingMode::VocabParallel; break;
    case FsdpEmbedding::Auto:
      o.embedding =
          b.vocab_parallel < b.gather ? EmbeddingMode::VocabParallel : EmbeddingMode::Gather;
      o.embedding_choice =
          str_cat("auto: the table moves ", format_bytes(double(b.gather)), " per step gathered, ",
                  format_bytes(double(b.vocab_parallel)), " vocabulary-parallel");
      break;
  }
  o.tile_batch = config.vocab_tiling_axis == VocabTilingAxis::Batch;
  const int64_t rows = ranks * batch;
  if (o.tile_batch && ranks > 1 &&
      (tiles <= 0 || rows % tiles != 0 || (rows / tiles * seq) % ranks != 0))
    fail("vocab_tiling_axis=batch needs num_vocab_tiling=", tiles, " to divide the global batch's ",
         rows, " rows (per_device_batch_size x ranks) and each tile's tokens to split evenly ",
         "over the ", ranks, " ranks");
  if (o.embedding == EmbeddingMode::VocabParallel && cfg.vocab_size < ranks)
    fail("fsdp_embedding=vocab_parallel needs at least one vocabulary row per rank (vocab_size ",
         cfg.vocab_size, ", ", ranks, " ranks)");
  return o;
}

// ---- the global batch ------------------------------------------------------------------------

VocabInputs alloc_vocab_inputs(Backend& be, int64_t ranks, int64_t tokens_per_rank) {
  const Shape shape{ranks * tokens_per_rank};
  return {be.alloc(shape, DType::I32, MemKind::Data), be.alloc(shape, DType::I32, MemKind::Data),
          be.alloc(shape, DType::I32, MemKind::Data), Tensor(), Tensor()};
}

HeadChunks head_chunks(int64_t ranks, int64_t rank, int64_t batch, int64_t seq, int64_t tiles) {
  const int64_t N = ranks, T = batch * seq, tile = N * T / tiles;  // tokens per tile
  HeadChunks h;
  h.C = tile / N;
  GEMMAX_CHECK(h.C * N * tiles == N * T, "head chunks of ", N, " ranks x ", T, " tokens in ", tiles,
               " tiles");
  auto overlap = [](int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
    return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
  };
  for (int64_t t = 0; t < tiles; ++t) {
    // In the tile's token coordinates: this rank's tokens [m0, m1), rank q's [q T - t tile, ...).
    const int64_t m0 = std::max<int64_t>(0, rank * T - t * tile);
    const int64_t m1 = std::min<int64_t>(tile, (rank + 1) * T - t * tile);
    h.first.push_back(std::clamp<int64_t>(t * tile - rank * T, 0, T));
    std::vector<int64_t> send(static_cast<size_t>(N)), recv(static_cast<size_t>(N));
    for (int64_t q = 0; q < N; ++q) {
      send[size_t(q)] = m1 > m0 ? overlap(m0, m1, q * h.C, (q + 1) * h.C) : 0;
      recv[size_t(q)] =
          overlap(rank * h.C, (rank + 1) * h.C, q * T - t * tile, (q + 1) * T - t * tile);
    }
    h.send.push_back(std::move(send));
    h.recv.push_back(std::move(recv));
  }
  return h;
}

int64_t head_chunk_token(const HeadChunks& h, int64_t ranks, int64_t tile, int64_t r, int64_t i) {
  return tile * ranks * h.C + r * h.C + i;
}

ShardedBatch alloc_sharded_batch(Backend& be, const ShardLayout& layout, const FsdpOptions& opt,
                                 int64_t batch, int64_t seq) {
  ShardedBatch b;
  b.in = alloc_step_inputs(be, batch, seq);
  b.in.replicas = layout.ranks;
  if (opt.embedding == EmbeddingMode::VocabParallel)
    b.vocab = alloc_vocab_inputs(be, layout.ranks, batch * seq);
  else if (opt.tile_batch && layout.ranks > 1)
    for (Tensor* t : {&b.vocab.chunk_targets, &b.vocab.chunk_mask})
      *t = be.alloc({batch * seq}, DType::I32, MemKind::Data);
  return b;
}

ShardedBatch upload_sharded_batch(Backend& be, Comm& comm, const ShardLayout& layout,
                                  const FsdpOptions& opt, int64_t num_tiles, int64_t vocab_size,
                                  const Batch& batch) {
  ShardedBatch b;
  b.in = upload_batch(be, batch);
  b.in.replicas = comm.size();
  const int64_t N = comm.size(), T = batch.tokens();
  // The global target count normalises the cross-entropy.
  Tensor counts = control_buffer({N}, DType::I64);
  Tensor mine = control_buffer({1}, DType::I64);
  mine.data<int64_t>()[0] = b.in.num_targets;
  comm.all_gather(mine, counts, "the batches' target counts").wait();
  b.in.total_targets = 0;
  for (int64_t r = 0; r < N; ++r) b.in.total_targets += counts.data<int64_t>()[r];
  const bool tile_batch = opt.tile_batch && N > 1;
  if (!gathers_batch_tokens(opt, N)) return b;

  // Every rank's tokens, targets and target mask, then each tile's rows seen from this rank's
  // vocabulary rows (the head's tiles along the global batch with vocab_tiling_axis=batch).
  auto gather = [&](const std::vector<int32_t>& v, const char* what) {
    Tensor all = control_buffer({N * T}, DType::I32);
    comm.all_gather(Tensor::wrap(const_cast<int32_t*>(v.data()), {T}, DType::I32), all, what)
        .wait();
    return all;
  };
  const Tensor tokens = gather(batch.inputs, "the batches' tokens");
  const Tensor targets = gather(batch.targets, "the batches' targets");
  const Tensor mask = gather(batch.target_segment_ids, "the batches' target masks");
  const HeadChunks h =
      tile_batch ? head_chunks(N, comm.rank(), batch.batch, batch.seq, num_tiles) : HeadChunks();
  if (opt.embedding != EmbeddingMode::VocabParallel) {
    // The table gathered: this rank's chunk of each head tile, in vocabulary ids.
    Tensor c_tgt = control_buffer({T}, DType::I32), c_mask = control_buffer({T}, DType::I32);
    for (int64_t t = 0, row = 0; t < num_tiles; ++t)
      for (int64_t i = 0; i < h.C; ++i, ++row) {
        const int64_t g = head_chunk_token(h, N, t, comm.rank(), i);
        c_tgt.data<int32_t>()[row] = targets.data<int32_t>()[g];
        c_mask.data<int32_t>()[row] = mask.data<int32_t>()[g] != 0 ? 1 : 0;
      }
    b.vocab.chunk_targets = be.alloc({T}, DType::I32, MemKind::Data);
    b.vocab.chunk_mask = be.alloc({T}, DType::I32, MemKind::Data);
    be.upload(b.vocab.chunk_targets, c_tgt);
    be.upload(b.vocab.chunk_mask, c_mask);
    return b;
  }
  const VocabSlice s = vocab_slice(vocab_size, N, comm.rank());
  const int64_t C = T / num_tiles;
  Tensor h_tok = control_buffer({N * T}, DType::I32);
  Tensor h_tgt = control_buffer({N * T}, DType::I32);
  Tensor h_mask = control_buffer({N * T}, DType::I32);
  int64_t row = 0;
  for (int64_t t = 0; t < num_tiles; ++t)
    for (int64_t r = 0; r < N; ++r)
      for (const TileBlock& k : tile_blocks(batch.batch, batch.seq, num_tiles, t))
        for (int64_t i = 0; i < k.count; ++i, ++row) {
          const int64_t src = r * T + k.token + i;
          // The head's row of the same place: rank r's chunk of head tile t (tile_batch).
          const int64_t head =
              tile_batch ? head_chunk_token(h, N, t, r, row - (t * N + r) * C) : src;
          const int32_t tok = tokens.data<int32_t>()[src] - int32_t(s.first);
          const int32_t tgt = targets.data<int32_t>()[head] - int32_t(s.first);
          const bool counted = mask.data<int32_t>()[head] != 0;
          h_tok.data<int32_t>()[row] = tok >= 0 && tok < s.rows ? tok : int32_t(s.piece);
          h_tgt.data<int32_t>()[row] = counted && tgt >= 0 && tgt < s.rows ? tgt : -1;
          h_mask.data<int32_t>()[row] = counted ? 1 : 0;
        }
  GEMMAX_CHECK(row == N * T && C * num_tiles == T, "vocabulary inputs: ", row, " rows");
  b.vocab = alloc_vocab_inputs(be, N, T);
  be.upload(b.vocab.tokens, h_tok);
  be.upload(b.vocab.targets, h_tgt);
  be.upload(b.vocab.mask, h_mask);
  return b;
}

// ---- FsdpParams ------------------------------------------------------------------------------

FsdpParams::FsdpParams(Backend& be, Comm& comm, const ParamTable& table, const ShardLayout& layout,
                       const FsdpOptions& opt, const ModelOptions& model, const Tensor& weights,
                       const Tensor& grads, const VocabInputs& vocab, bool backward)
    : be_(be),
      comm_(comm),
      table_(table),
      layout_(layout),
      opt_(opt),
      model_(model),
      weights_(weights),
      grads_(grads),
      vocab_(vocab) {
  GEMMAX_CHECK(layout.sharded() && layout.ranks == comm.size() && layout.rank == comm.rank(),
               "FSDP layout for rank ", layout.rank, " of ", layout.ranks, " on a comm of ",
               comm.size());
  group_of_.assign(table.specs().size(), -1);
  for (size_t g = 0; g < layout.groups.size(); ++g)
    for (size_t i : layout.groups[g].params) group_of_[i] = int(g);

  // The stages' gathers. The lookup gathers the table in the weight dtype (as one device looks up
  // its fp32 master table), the head in its product's dtype; small vectors keep their dtype.
  const int64_t L = table.config().num_layers;
  const DType w = weights.dtype(), act = model.act;
  const bool gather_table = opt.embedding == EmbeddingMode::Gather;
  auto layer_stage = [&](int64_t l, const char* pass) {
    Gathered g;
    g.groups.push_back(layout.layer_matrices[size_t(l)]);
    g.dtypes.push_back(act);
    if (layout.layer_vectors[size_t(l)] >= 0) {
      g.groups.push_back(layout.layer_vectors[size_t(l)]);
      g.dtypes.push_back(w);
    }
    g.what = str_cat("layer ", l, " (", pass, ")");
    return g;
  };
  Gathered lookup;
  lookup.what = "the embedding (lookup)";
  if (gather_table) lookup.groups = {layout.embedding}, lookup.dtypes = {w};
  stages_.push_back(std::move(lookup));
  for (int64_t l = 0; l < L; ++l) stages_.push_back(layer_stage(l, "forward"));
  Gathered head;
  head.what = "the embedding and final norm (head)";
  if (gather_table)
    head.groups.push_back(layout.embedding), head.dtypes.push_back(head_dot_dtype(model));
  if (layout.final_norm >= 0) head.groups.push_back(layout.final_norm), head.dtypes.push_back(w);
  stages_.push_back(std::move(head));
  if (!backward) return;  // forward only (evaluation): nothing past the head is gathered
  for (int64_t l = L - 1; l >= 0; --l) stages_.push_back(layer_stage(l, "backward"));
}

size_t FsdpParams::stage(int64_t layer, Pass pass) const {
  const int64_t L = table_.config().num_layers;
  return size_t(pass == Pass::Forward ? 1 + layer : L + 2 + (L - 1 - layer));
}

Tensor FsdpParams::local_piece(const Tensor& buf, int group) const {
  const ShardGroup& g = layout_.groups[size_t(group)];
  return buf.flat_slice(g.local, {g.piece});
}

void FsdpParams::start(size_t s) {
  Gathered& st = stages_[s];
  if (st.started) return;
  st.started = true;
  for (size_t k = 0; k < st.groups.size(); ++k) {
    const ShardGroup& g = layout_.groups[size_t(st.groups[k])];
    const DType dt = st.dtypes[k];
    Tensor full = be_.alloc({layout_.ranks * g.piece}, dt, MemKind::Workspace);
    Tensor send = local_piece(weights_, st.groups[k]);
    if (dt != send.dtype()) {  // cast this rank's piece, then gather the compute-dtype weights
      Tensor cast = be_.alloc({g.piece}, dt, MemKind::Workspace);
      be_.copy({.dst = cast, .src = send});
      send = cast;
    }
    st.requests.push_back(comm_.all_gather(send, full, g.name + " for " + st.what));
    st.full.push_back(full);
  }
}

FsdpParams::Gathered& FsdpParams::ready(size_t s) {
  for (size_t k = s; k <= s + size_t(opt_.prefetch) && k < stages_.size(); ++k) start(k);
  Gathered& st = stages_[s];
  for (CommRequest& r : st.requests) r.wait();
  st.requests.clear();
  st.ready = true;
  return st;
}

void FsdpParams::release(size_t s) {
  Gathered& st = stages_[s];
  st.full.clear();
  st.ready = false;
}

ParamLocation FsdpParams::locate(const ParamSpec& spec, const Gathered& st,
                                 const Tensor& local) const {
  const size_t i = spec_index(spec);
  const ParamPiece& p = layout_.pieces[i];
  if (p.replicated) return {local, p.local};
  const int group = group_of_[i];
  for (size_t k = 0; k < st.groups.size(); ++k) {
    if (st.groups[k] != group) continue;
    const ShardGroup& g = layout_.groups[size_t(group)];
    for (size_t j = 0; j < g.params.size(); ++j)
      if (g.params[j] == i) return {st.full[k], g.offset[j]};
  }
  fail("FSDP: ", spec.name, " is not gathered for ", st.what);
}

Tensor FsdpParams::embed(const StepInputs& in) {
  const ModelConfig& c = table_.config();
  Tensor x = be_.alloc({in.tokens_count(), c.d_model}, model_.act, MemKind::Activations);
  Gathered& st = ready(0);
  const ParamSpec& spec = table_.specs()[layout_.groups[size_t(layout_.embedding)].params[0]];
  if (opt_.embedding == EmbeddingMode::Gather) {
    const Tensor table = locate(spec, st, Tensor()).buffer.flat_slice(0, spec.shape);
    be_.embedding_forward(
        {.x = x, .tokens = in.tokens, .table = table, .scale = std::sqrt(double(c.d_model))});
  } else {
    const Tensor piece = local_piece(weights_, layout_.embedding);
    vocab_parallel_embed(be_, comm_, c, model_, in, vocab_,
                         piece.view({piece.numel() / c.d_model, c.d_model}), x);
  }
  release(0);
  return x;
}

LayerWeights FsdpParams::layer(int64_t l, Pass pass) {
  comm_.set_progress(str_cat(pass == Pass::Forward ? "forward" : "backward", " of layer ", l));
  const Gathered& st = ready(stage(l, pass));
  return bind_layer(table_, l, [&](const ParamSpec& s) { return locate(s, st, weights_); });
}

void FsdpParams::bound_scatters(size_t in_flight) {
  while (scatters_.size() > in_flight) {
    for (CommRequest& r : scatters_.front()) r.wait();
    scatters_.pop_front();
  }
}

void FsdpParams::scatter(std::vector<std::pair<int, Tensor>> full, const std::string& what) {
  std::vector<CommRequest> requests;
  for (auto& [group, buf] : full)
    requests.push_back(comm_.reduce_scatter(buf, local_piece(grads_, group),
                                            layout_.groups[size_t(group)].name + " " + what));
  scatters_.push_back(std::move(requests));
  if (opt_.prefetch == 0) bound_scatters(0);
}

LayerWeights FsdpParams::layer_grads(int64_t l) {
  if (!grads_.defined()) return LayerWeights();  // a frozen base
  // At most `prefetch` layers' gradients are still being reduce-scattered while this one fills.
  bound_scatters(size_t(opt_.prefetch));
  layer_grads_.clear();
  Gathered view;
  for (int group : {layout_.layer_matrices[size_t(l)], layout_.layer_vectors[size_t(l)]}) {
    if (group < 0) continue;
    const ShardGroup& g = layout_.groups[size_t(group)];
    Tensor full = be_.zeros({layout_.ranks * g.piece}, grads_.dtype(), MemKind::Workspace);
    layer_grads_.emplace_back(group, full);
    view.groups.push_back(group);
    view.full.push_back(full);
  }
  view.what = str_cat("the gradients of layer ", l);
  return bind_layer(table_, l, [&](const ParamSpec& s) { return locate(s, view, grads_); });
}

void FsdpParams::layer_done(int64_t l, Pass pass) {
  release(stage(l, pass));
  if (pass == Pass::Backward && !layer_grads_.empty())
    scatter(std::move(layer_grads_), str_cat("(gradients of layer ", l, ")"));
  layer_grads_.clear();
}

void FsdpParams::head(const StepInputs& in, const Tensor& x, double grad_scale, const Tensor& loss,
                      const Tensor& dx) {
  const ModelConfig& c = table_.config();
  comm_.set_progress("the output head");
  const size_t s = size_t(c.num_layers) + 1;
  const Gathered& st = ready(s);
  const ParamSpec& norm = table_.at("norm.weight");
  const ParamLocation n = locate(norm, st, weights_);
  const Tensor final_norm = n.buffer.flat_slice(n.offset, norm.shape);
  // The final norm's gradient: the replicated one, or a full-shape buffer to reduce-scatter.
  // Without dx (forward only) the head computes the loss alone; without gradients (a frozen
  // base) it computes dx alone.
  const bool backward = dx.defined(), grads = grads_.defined();
  std::vector<std::pair<int, Tensor>> full;
  Tensor dnorm;
  if (!grads) {
  } else if (layout_.final_norm >= 0) {
    const ShardGroup& g = layout_.groups[size_t(layout_.final_norm)];
    Tensor buf = be_.zeros({layout_.ranks * g.piece}, grads_.dtype(), MemKind::Workspace);
    full.emplace_back(layout_.final_norm, buf);
    dnorm = buf.flat_slice(0, norm.shape);
  } else {
    dnorm = grads_.flat_slice(layout_.pieces[spec_index(norm)].local, norm.shape);
  }
  const ParamSpec& emb = table_.specs()[layout_.groups[size_t(layout_.embedding)].params[0]];
  // The head over tokens `hin` (x_h, gradient into dx_h) with model options `mo` and, when
  // vocabulary-parallel, the tiles' inputs `v`.
  std::function<void(const StepInputs&, const VocabInputs&, const ModelOptions&, const Tensor&,
                     const Tensor&)>
      run;
  if (opt_.embedding == EmbeddingMode::Gather) {
    const Tensor table = locate(emb, st, Tensor()).buffer.flat_slice(0, emb.shape);
    const ShardGroup& g = layout_.groups[size_t(layout_.embedding)];
    Tensor dtable;
    if (grads) {
      dtable = be_.zeros({layout_.ranks * g.piece}, grads_.dtype(), MemKind::Workspace);
      full.emplace_back(layout_.embedding, dtable);
    }
    const HeadWeights hw{table, final_norm},
        hg{grads ? dtable.flat_slice(0, emb.shape) : Tensor(), dnorm};
    run = [&, hw, hg](const StepInputs& hin, const VocabInputs&, const ModelOptions& mo,
                      const Tensor& x_h, const Tensor& dx_h) {
      Tensor d = dx_h;
      head_loss(be_, c, hin, mo, hw, x_h, grad_scale, loss, grads ? &hg : nullptr,
                backward ? &d : nullptr);
    };
  } else {
    const VocabSlice vs = vocab_slice(c.vocab_size, comm_.size(), comm_.rank());
    const Tensor master =
        local_piece(weights_, layout_.embedding).flat_slice(0, {vs.rows, c.d_model});
    Tensor table = master;
    if (head_dot_dtype(model_) != master.dtype()) {  // sized by the stored rows: alike on all ranks
      table = be_.alloc({vs.piece * c.d_model}, head_dot_dtype(model_), MemKind::Workspace)
                  .flat_slice(0, {vs.rows, c.d_model});
      be_.copy({.dst = table, .src = master});
    }
    const Tensor dtable =
        grads ? local_piece(grads_, layout_.embedding).flat_slice(0, {vs.rows, c.d_model})
              : Tensor();
    run = [&, table, dtable](const StepInputs& hin, const VocabInputs& v, const ModelOptions& mo,
                             const Tensor& x_h, const Tensor& dx_h) {
      vocab_parallel_head(be_, comm_, c, mo, hin, v, table, final_norm, x_h, grad_scale, loss,
                          dtable, dnorm, dx_h);
    };
  }
  if (!opt_.tile_batch || comm_.size() == 1) {
    run(in, vocab_, model_, x, dx);
  } else {
    // Seed change 5 (vocabulary tiling along the sequence, docs/SEED.md#each-change) turned off:
    // tile t of the global batch's rows, this rank's chunk of it brought here by an all-to-all of
    // the head's input, its gradient sent back by another (HeadChunks).
    const int64_t N = comm_.size(), D = c.d_model, tiles = model_.num_vocab_tiling;
    const HeadChunks h = head_chunks(N, comm_.rank(), in.batch, in.seq, tiles);
    ModelOptions one = model_;  // a chunk is one tile of one row
    one.num_vocab_tiling = 1;
    Tensor x_c = be_.alloc({h.C, D}, x.dtype(), MemKind::Workspace);
    Tensor dx_c = backward ? be_.alloc({h.C, D}, dx.dtype(), MemKind::Workspace) : Tensor();
    auto elements = [D](std::vector<int64_t> tokens) {
      for (int64_t& n : tokens) n *= D;
      return tokens;
    };
    StepInputs hin = in;
    hin.batch = 1;
    hin.seq = h.C;
    for (int64_t t = 0; t < tiles; ++t) {
      int64_t mine = 0;
      for (int64_t n : h.send[size_t(t)]) mine += n;
      const Tensor x_t = x.rows(h.first[size_t(t)], h.first[size_t(t)] + mine);
      const Tensor dx_t =
          backward ? dx.rows(h.first[size_t(t)], h.first[size_t(t)] + mine) : Tensor();
      comm_
          .all_to_all(x_t, elements(h.send[size_t(t)]), x_c, elements(h.recv[size_t(t)]),
                      str_cat("the head's input, tile ", t))
          .wait();
      VocabInputs v;
      if (opt_.embedding == EmbeddingMode::Gather) {
        hin.targets = vocab_.chunk_targets.flat_slice(t * h.C, {h.C});
        hin.target_mask = vocab_.chunk_mask.flat_slice(t * h.C, {h.C});
      } else {
        v.targets = vocab_.targets.flat_slice(t * N * h.C, {N * h.C});
        v.mask = vocab_.mask.flat_slice(t * N * h.C, {N * h.C});
      }
      run(hin, v, one, x_c, dx_c);
      if (!backward) continue;
      comm_
          .all_to_all(dx_c, elements(h.recv[size_t(t)]), dx_t, elements(h.send[size_t(t)]),
                      str_cat("the head's input gradient, tile ", t))
          .wait();
    }
  }
  release(s);
  if (!full.empty()) scatter(std::move(full), "(gradients of the head)");
}

void FsdpParams::embed_backward(const StepInputs& in, const Tensor& dx) {
  if (!grads_.defined()) return;  // a frozen base
  const ModelConfig& c = table_.config();
  comm_.set_progress("the embedding backward");
  const ShardGroup& g = layout_.groups[size_t(layout_.embedding)];
  const ParamSpec& emb = table_.specs()[g.params[0]];
  if (opt_.embedding == EmbeddingMode::VocabParallel) {
    const Tensor piece = local_piece(grads_, layout_.embedding);
    vocab_parallel_embed_backward(be_, comm_, c, model_, in, vocab_, dx,
                                  piece.view({piece.numel() / c.d_model, c.d_model}));
    return;
  }
  // The lookup's full-shape gradient, reduce-scattered into a piece that finish_gradients() adds
  // to the head's (the reduce-scatter writes its output).
  Tensor full = be_.zeros({layout_.ranks * g.piece}, grads_.dtype(), MemKind::Workspace);
  be_.embedding_backward({.dtable = full.flat_slice(0, emb.shape),
                          .dx = dx,
                          .tokens = in.tokens,
                          .scale = std::sqrt(double(c.d_model))});
  lookup_grad_ = be_.alloc({g.piece}, grads_.dtype(), MemKind::Workspace);
  std::vector<CommRequest> r;
  r.push_back(comm_.reduce_scatter(full, lookup_grad_, "embedding (gradient of the lookup)"));
  scatters_.push_back(std::move(r));
}

CommRequest FsdpParams::finish_gradients() {
  // The replicated gradients are complete: their all-reduce moves while the last reduce-scatters
  // finish.
  CommRequest replicated;
  if (layout_.replicated > 0)
    replicated = comm_.all_reduce(grads_.flat_slice(0, {layout_.replicated}), ReduceOp::Sum,
                                  "the replicated small vectors' gradients");
  bound_scatters(0);
  if (lookup_grad_.defined()) {
    be_.axpy({.y = local_piece(grads_, layout_.embedding), .alpha = 1.0, .x = lookup_grad_});
    lookup_grad_ = Tensor();
  }
  return replicated;
}

}  // namespace gemmax

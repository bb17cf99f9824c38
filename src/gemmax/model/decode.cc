#include "gemmax/model/decode.h"

#include <algorithm>
#include <cmath>

#include "gemmax/base/progress.h"
#include "gemmax/model/head.h"
#include "gemmax/model/layer.h"
#include "gemmax/model/per_layer_inputs.h"

namespace gemmax {

Decoder::Decoder(const Gemma4Model& model, const Tensor& weights, const DecoderOptions& options)
    : model_(model), be_(model.backend()), options_(options) {
  const ModelConfig& c = model.config();
  const DType act = model.options().act;
  GEMMAX_CHECK(weights.numel() == model.params().total(), "decoder: weights ", weights.str(),
               " for a model of ", model.params().total(), " parameters");
  if (options_.max_length <= 0)
    fail("decoder: max_length must be positive (prompt + new tokens), got ", options_.max_length);
  if (options_.prefill_chunk < 0)
    fail("decoder: prefill_chunk must be >= 0 (0: the sliding window), got ",
         options_.prefill_chunk);
  if (options_.prefill_chunk == 0) options_.prefill_chunk = std::max<int64_t>(1, c.sliding_window);
  options_.prefill_chunk = std::min(options_.prefill_chunk, options_.max_length);

  // The compute-dtype weights, made once: decoding runs every layer for every token.
  const ModelWeights master = bind_model(model.params(), weights);
  weights_.embed = master.embed;  // the lookup reads the master table, as in training
  head_embed_ = compute_copy(be_, master.embed, head_dot_dtype(model.options()));
  weights_.final_norm = master.final_norm;
  if (c.has_per_layer_inputs())  // the table stays the master, as the embedding's does
    weights_.per_layer = {master.per_layer.table,
                          compute_copy(be_, master.per_layer.model_proj, act),
                          master.per_layer.proj_norm, {}};
  for (const LayerWeights& w : master.layers)
    weights_.layers.push_back(compute_weights(be_, w, act, model.options().float32_gate_logits));
  if (const BoundAdapters& lora = options_.lora) {
    for (int64_t l = 0; l < c.num_layers; ++l)
      weights_.layers[size_t(l)].lora =
          compute_adapters(be_, *lora.table, lora.weights, l, model.options());
    weights_.per_layer.model_proj_lora =
        compute_model_proj_adapter(be_, *lora.table, lora.weights, model.options());
  }
  rope_local_ = be_.to_device(
      rope_inv_freq(c.head_dim, c.local_rope_theta, c.local_rope_proportion), MemKind::Workspace);
  rope_global_ =
      be_.to_device(rope_inv_freq(c.global_head_dim, c.global_rope_theta, c.global_rope_proportion),
                    MemKind::Workspace);

  caches_.resize(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.kv_shared(l)) continue;  // attends over its donor's cache: holds nothing itself
    LayerCache& lc = caches_[l];
    lc.window = c.is_global(l) ? 0 : c.sliding_window;
    lc.slots = lc.window == 0
                   ? options_.max_length
                   : std::min(options_.max_length, lc.window + options_.prefill_chunk - 1);
    const Shape shape{lc.slots, c.layer_kv_heads(l), c.layer_head_dim(l)};
    lc.k = be_.zeros(shape, act, MemKind::Activations);
    lc.v = be_.zeros(shape, act, MemKind::Activations);
    lc.positions = be_.alloc({lc.slots}, DType::I32, MemKind::Activations);
    be_.fill({.x = lc.positions, .value = -1.0});
  }
}

size_t Decoder::cache_bytes() const {
  size_t n = 0;
  for (const LayerCache& lc : caches_) n += lc.k.nbytes() + lc.v.nbytes() + lc.positions.nbytes();
  return n;
}

Tensor Decoder::prefill(std::span<const int32_t> tokens, Tensor* all_logits, Progress* progress) {
  if (tokens.empty()) fail("decoder: prefill needs at least one token");
  const int64_t n = int64_t(tokens.size()), V = model_.config().vocab_size;
  if (all_logits) *all_logits = Tensor::empty({n, V}, head_dot_dtype(model_.options()));
  Tensor last;
  for (int64_t begin = 0; begin < n; begin += options_.prefill_chunk) {
    const int64_t end = std::min(n, begin + options_.prefill_chunk);
    const bool final_chunk = end == n;
    // Only the last token's logits are needed, unless the caller asks for all of them.
    const int64_t rows = all_logits ? end - begin : (final_chunk ? 1 : 0);
    Tensor logits = run(tokens.subspan(begin, end - begin), rows);
    if (progress) progress->add(double(end - begin));
    if (rows == 0) continue;
    logits = be_.to_host(logits);
    if (all_logits)
      std::copy_n(static_cast<const char*>(logits.raw()), logits.nbytes(),
                  static_cast<char*>(all_logits->rows(begin, end).raw()));
    if (final_chunk) last = logits.rows(rows - 1, rows).view({V});
  }
  return last;
}

bool Decoder::truncate(int64_t length) {
  if (length < 0 || length > length_) return false;
  for (const LayerCache& lc : caches_)
    if (lc.window > 0 && written_ > lc.slots && written_ - length > lc.slots - lc.window)
      return false;
  length_ = length;
  return true;
}

Tensor Decoder::step(int32_t token) {
  const int32_t one[1] = {token};
  return be_.to_host(run(one, 1)).view({model_.config().vocab_size});
}

Tensor Decoder::run(std::span<const int32_t> tokens, int64_t rows) {
  const ModelConfig& c = model_.config();
  const DType act = model_.options().act;
  const int64_t n = int64_t(tokens.size());
  if (length_ + n > options_.max_length)
    fail("decoder: ", length_ + n, " positions exceed max_length ", options_.max_length,
         "; make the decoder with a larger max_length (prompt + new tokens)");
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocab_size)
      fail("decoder: token ", t, " is outside the model's vocabulary [0, ", c.vocab_size, ")");

  // One row of n tokens, one segment, positions continuing the sequence; no targets.
  Batch b;
  b.batch = 1;
  b.seq = n;
  for (int64_t i = 0; i < n; ++i) {
    b.inputs.push_back(tokens[i]);
    b.targets.push_back(0);
    b.positions.push_back(int32_t(length_ + i));
    b.segment_ids.push_back(1);
    b.target_segment_ids.push_back(0);
  }
  const StepInputs in = upload_batch(be_, b);
  LayerContext ctx{be_,
                   c,
                   in,
                   model_.options(),
                   rope_table(be_, in, rope_local_, act),
                   rope_table(be_, in, rope_global_, act),
                   0.0,
                   Tensor()};
  ctx.attention_core = this;

  Tensor x = be_.alloc({n, c.d_model}, act, MemKind::Activations);
  be_.embedding_forward({.x = x,
                         .tokens = in.tokens,
                         .table = weights_.embed,
                         .scale = std::sqrt(double(c.d_model))});
  // The small block: this pass's per-layer inputs, and its donors' K/V for the sharing layers'
  // projections (their attention reads the donors' caches, which hold these positions too).
  DonorKv donor_kv(c.num_layers);
  if (c.num_kv_shared_layers > 0) ctx.donor_kv = &donor_kv;
  PerLayerInputActs pli;
  if (c.has_per_layer_inputs()) {
    per_layer_inputs_forward(ctx, weights_.per_layer, x, pli);
    ctx.per_layer_inputs = pli.pli;
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Tensor y = be_.alloc({n, c.d_model}, act, MemKind::Activations);
    LayerActs acts;
    layer_forward(ctx, l, weights_.layers[l], x, y, acts);
    x = y;
  }
  length_ += n;
  written_ = std::max(written_, length_);
  if (rows == 0) return Tensor();
  Tensor logits = head_logits(be_, c, ctx.opt, HeadWeights{head_embed_, weights_.final_norm},
                              x.rows(n - rows, n));
  if (logits.dtype() != stat_dtype(act)) {  // bf16 logits are sampled from in fp32
    Tensor wide = be_.alloc(logits.shape(), stat_dtype(act), MemKind::Workspace);
    be_.copy({.dst = wide, .src = logits});
    logits = wide;
  }
  return logits;
}

void Decoder::attend(const LayerContext& ctx, int64_t layer, AttentionActs& a) {
  const ModelConfig& c = model_.config();
  // A sharing layer reads its donor's cache, which the donor (an earlier layer of the same
  // kind) has already written for this pass.
  const bool shared = c.kv_shared(layer);
  LayerCache& lc = caches_[shared ? c.kv_donor(layer) : layer];
  const int64_t n = ctx.tokens(), start = length_;  // length_ advances after the whole pass
  GEMMAX_CHECK(n <= lc.slots, "decoder: ", n, " tokens in one pass over ", lc.slots, " slots");
  // Write the new keys and values first (in at most two runs where the ring wraps): the
  // queries attend to them too. The slots overwritten hold positions <= start - window,
  // which no query of this pass can see.
  for (int64_t i = 0; i < n && !shared;) {
    const int64_t slot = (start + i) % lc.slots;
    const int64_t m = std::min(n - i, lc.slots - slot);
    be_.copy({.dst = lc.k.rows(slot, slot + m), .src = a.k.rows(i, i + m)});
    be_.copy({.dst = lc.v.rows(slot, slot + m), .src = a.v.rows(i, i + m)});
    be_.copy({.dst = lc.positions.rows(slot, slot + m), .src = ctx.in.positions.rows(i, i + m)});
    i += m;
  }
  const int64_t used = std::min(start + n, lc.slots);
  a.attn = ctx.alloc(a.q.shape());
  be_.attention_decode({.o = a.attn,
                        .q = a.q,
                        .q_pos = ctx.in.positions,
                        .k = lc.k.rows(0, used),
                        .v = lc.v.rows(0, used),
                        .kv_pos = lc.positions.rows(0, used),
                        .window = lc.window});
}

}  // namespace gemmax

#include "gemmax/model/lora/nf4_base.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gemmax/base/convert.h"
#include "gemmax/base/error.h"
#include "gemmax/base/nf4.h"
#include "gemmax/model/head.h"

namespace gemmax {

Nf4Layout Nf4Layout::of(const ParamTable& table, int64_t block, int ranks, int rank) {
  GEMMAX_CHECK(block >= 2 && block % 2 == 0, "NF4 blocks hold an even number of elements, got ",
               block);
  GEMMAX_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "Nf4Layout: rank ", rank, " of ", ranks);
  Nf4Layout l;
  l.block = block;
  l.ranks = ranks;
  l.rank = rank;
  for (const ParamSpec& s : table.specs()) {
    const bool q = s.fsdp == FsdpRole::LayerMatrix;
    l.quantised.push_back(q);
    l.dense.push_back(q ? -1 : l.dense_total);
    int g = -1;
    if (q) {
      g = l.group_of_layer(s.layer);
      if (g < 0) {
        g = int(l.groups.size());
        l.groups.push_back({.layer = s.layer});
      }
    }
    l.group.push_back(g);
    l.codes.push_back(q ? l.groups[size_t(g)].code_full : -1);
    l.scales.push_back(q ? l.groups[size_t(g)].scale_full : -1);
    if (q) {
      l.groups[size_t(g)].code_full += nf4_code_bytes(s.numel());
      l.groups[size_t(g)].scale_full += nf4_blocks(s.numel(), block);
    } else {
      l.dense_total += s.numel();
    }
  }
  for (Group& g : l.groups) {
    g.code_piece = (g.code_full + ranks - 1) / ranks;
    g.scale_piece = (g.scale_full + ranks - 1) / ranks;
    g.code_local = l.code_bytes;
    g.scale_local = l.blocks;
    l.code_bytes += g.code_piece;
    l.blocks += g.scale_piece;
    l.model_code_bytes += g.code_full;
    l.model_blocks += g.scale_full;
  }
  return l;
}

int Nf4Layout::group_of_layer(int64_t layer) const {
  for (size_t g = 0; g < groups.size(); ++g)
    if (groups[g].layer == layer) return int(g);
  return -1;
}

Nf4Base alloc_nf4_base(Backend& be, const ParamTable& table, DType act, int64_t block, int ranks,
                       int rank) {
  Nf4Base b;
  b.layout = Nf4Layout::of(table, block, ranks, rank);
  b.dense = be.alloc({b.layout.dense_total}, act, MemKind::Params);
  b.codes = be.alloc({b.layout.code_bytes}, DType::U8, MemKind::Params);
  b.absmax = be.alloc({b.layout.blocks}, DType::F32, MemKind::Params);
  // The pieces' padding is gathered with them: zeros, never uninitialised bytes.
  if (ranks > 1) {
    be.fill({.x = b.codes, .value = 0.0});
    be.fill({.x = b.absmax, .value = 0.0});
  }
  return b;
}

Nf4Filler::Nf4Filler(Backend& be, const ParamTable& table, Nf4Base& base)
    : be_(be), table_(table), base_(base) {
  // In place where the backend's buffers are host memory; else staged and uploaded by finish()
  // (zeroed when sharded: the pieces' padding is gathered too).
  auto host = [&](const Tensor& t) {
    const Tensor h = be.to_host(t);
    if (h.shares_storage(t)) return h;
    return base.layout.ranks > 1 ? Tensor::zeros(t.shape(), t.dtype())
                                 : Tensor::empty(t.shape(), t.dtype());
  };
  dense_ = host(base.dense);
  codes_ = host(base.codes);
  absmax_ = host(base.absmax);
}

void Nf4Filler::put(const ParamSpec& s, const Tensor& values) {
  const size_t i = size_t(&s - table_.specs().data());
  const Nf4Layout& l = base_.layout;
  const int64_t n = s.numel();
  GEMMAX_CHECK(values.numel() == n, "Nf4Filler: ", values.str(), " for ", s.name);
  if (!l.quantised[i]) return convert_into(values, dense_.flat_slice(l.dense[i], {n}));
  const Nf4Layout::Group& g = l.groups[size_t(l.group[i])];
  Tensor x = Tensor::empty({n}, DType::F32);
  convert_into(values, x);
  // One rank quantises in place; a rank of several quantises the whole matrix, keeps its pieces.
  const bool whole = l.ranks == 1;
  const int64_t code_n = nf4_code_bytes(n), blocks = nf4_blocks(n, l.block);
  std::vector<uint8_t> all_codes(whole ? 0 : size_t(code_n));
  std::vector<float> all_absmax(whole ? 0 : size_t(blocks));
  uint8_t* codes = whole ? codes_.data<uint8_t>() + g.code_local + l.codes[i] : all_codes.data();
  float* absmax = whole ? absmax_.data<float>() + g.scale_local + l.scales[i] : all_absmax.data();
  // Whole blocks per thread: each writes its own code bytes and scales.
  const int64_t chunk = 1024;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks; b += chunk) {
    const int64_t begin = b * l.block, count = std::min(chunk * l.block, n - begin);
    nf4_quantize(x.data<float>() + begin, count, l.block, codes + begin / 2, absmax + b);
  }
  if (whole) return;
  // The part of [at, at + count) of the group that falls in this rank's piece.
  auto keep = [&](const void* src, int64_t at, int64_t count, int64_t piece, int64_t local,
                  uint8_t* dst, size_t elem) {
    const int64_t lo = std::max(at, l.rank * piece), hi = std::min(at + count, (l.rank + 1) * piece);
    if (hi > lo)
      std::memcpy(dst + size_t(local + lo - l.rank * piece) * elem,
                  static_cast<const uint8_t*>(src) + size_t(lo - at) * elem, size_t(hi - lo) * elem);
  };
  keep(all_codes.data(), l.codes[i], code_n, g.code_piece, g.code_local, codes_.data<uint8_t>(), 1);
  keep(all_absmax.data(), l.scales[i], blocks, g.scale_piece, g.scale_local,
       reinterpret_cast<uint8_t*>(absmax_.data<float>()), sizeof(float));
}

Tensor Nf4Filler::dense_view(const ParamSpec& s) const {
  const size_t i = size_t(&s - table_.specs().data());
  const Nf4Layout& l = base_.layout;
  return l.quantised[i] ? Tensor() : dense_.flat_slice(l.dense[i], {s.numel()});
}

void Nf4Filler::finish() {
  for (auto [dst, src] : {std::pair{&base_.dense, &dense_}, std::pair{&base_.codes, &codes_},
                          std::pair{&base_.absmax, &absmax_}})
    if (!src->shares_storage(*dst)) be_.upload(*dst, *src);
}

void upload_nf4_base(Backend& be, const ParamTable& table, Nf4Base& base, const Tensor& full) {
  Nf4Filler fill(be, table, base);
  for (const ParamSpec& s : table.specs()) fill.put(s, full.flat_slice(s.offset, {s.numel()}));
  fill.finish();
}

Tensor nf4_round_trip(const ParamTable& table, const Tensor& full, int64_t block, DType dtype) {
  const Nf4Layout l = Nf4Layout::of(table, block);
  Tensor out = Tensor::empty(full.shape(), dtype, MemKind::Params);
  const std::vector<ParamSpec>& specs = table.specs();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    const int64_t n = s.numel();
    const Tensor src = full.flat_slice(s.offset, {n}), dst = out.flat_slice(s.offset, {n});
    if (!l.quantised[i]) {
      convert_into(src, dst);
      continue;
    }
    Tensor x = Tensor::empty({n}, DType::F32);
    convert_into(src, x);
    std::vector<uint8_t> codes(size_t(nf4_code_bytes(n)));
    std::vector<float> absmax(size_t(nf4_blocks(n, block)));
    nf4_quantize(x.data<float>(), n, block, codes.data(), absmax.data());
    nf4_dequantize(codes.data(), absmax.data(), n, block, x.data<float>());
    convert_into(x, dst);
  }
  return out;
}

Nf4Params::Nf4Params(Backend& be, const ParamTable& table, const ModelOptions& opt,
                     const Nf4Base& base)
    : be_(be), table_(table), opt_(opt), base_(base) {
  GEMMAX_CHECK(base.dense.dtype() == opt.act, "the NF4 base's dense part is ", base.dense.str(),
               ", the compute dtype ", dtype_name(opt.act));
}

Tensor Nf4Params::dense_view(const ParamSpec& s) const {
  const size_t i = size_t(&s - table_.specs().data());
  GEMMAX_CHECK(!base_.layout.quantised[i], s.name, " is quantised");
  return base_.dense.flat_slice(base_.layout.dense[i], s.shape);
}

void Nf4Params::group_whole(int g, Tensor& codes, Tensor& absmax) {
  const Nf4Layout::Group& group = base_.layout.groups[size_t(g)];
  GEMMAX_CHECK(base_.layout.ranks == 1, "Nf4Params: an NF4 base sharded over ",
               base_.layout.ranks, " ranks is gathered by FsdpNf4Params");
  codes = base_.codes.flat_slice(group.code_local, {group.code_full});
  absmax = base_.absmax.flat_slice(group.scale_local, {group.scale_full});
}

Tensor Nf4Params::dequantise_group(int64_t layer, std::vector<int64_t>& at) {
  const Nf4Layout& l = base_.layout;
  const int g = l.group_of_layer(layer);
  at.assign(table_.specs().size(), -1);
  int64_t n = 0;
  for (size_t i = 0; i < at.size(); ++i)
    if (l.group[i] == g && g >= 0) {
      at[i] = n;
      n += table_.specs()[i].numel();
    }
  if (g < 0) return Tensor();
  Tensor codes, absmax;
  group_whole(g, codes, absmax);
  Tensor buffer = be_.alloc({n}, opt_.act, MemKind::Workspace);
  for (size_t i = 0; i < at.size(); ++i) {
    if (at[i] < 0) continue;
    const int64_t numel = table_.specs()[i].numel();
    be_.dequantize_nf4({.out = buffer.flat_slice(at[i], {numel}),
                        .codes = codes.flat_slice(l.codes[i], {nf4_code_bytes(numel)}),
                        .absmax = absmax.flat_slice(l.scales[i], {nf4_blocks(numel, l.block)}),
                        .block = l.block});
  }
  return buffer;
}

Tensor Nf4Params::embed(const StepInputs& in) {
  const int64_t D = table_.config().d_model;
  Tensor x = be_.alloc({in.tokens_count(), D}, opt_.act, MemKind::Activations);
  be_.embedding_forward({.x = x,
                         .tokens = in.tokens,
                         .table = dense_view(table_.at("embed_tokens.weight")),
                         .scale = std::sqrt(double(D))});
  return x;
}

LayerWeights Nf4Params::layer(int64_t l, Pass) {
  std::vector<int64_t> at;
  const Tensor buffer = dequantise_group(l, at);
  const LayerWeights w = bind_layer(table_, l, [&](const ParamSpec& s) {
    const size_t i = size_t(&s - table_.specs().data());
    return at[i] >= 0 ? ParamLocation{buffer, at[i]}
                      : ParamLocation{base_.dense, base_.layout.dense[i]};
  });
  return compute_weights(be_, w, opt_.act, opt_.float32_gate_logits);
}

void Nf4Params::head(const StepInputs& in, const Tensor& x, double grad_scale, const Tensor& loss,
                     const Tensor& dx) {
  const HeadWeights hw{
      compute_copy(be_, dense_view(table_.at("embed_tokens.weight")), head_dot_dtype(opt_)),
      dense_view(table_.at("norm.weight"))};
  head_loss(be_, table_.config(), in, opt_, hw, x, grad_scale, loss, nullptr,
            dx.defined() ? &dx : nullptr);
}

PerLayerInputWeights Nf4Params::per_layer_weights() {
  const ParamSpec& proj = table_.at("per_layer_model_projection.weight");
  std::vector<int64_t> at;
  const Tensor buffer = dequantise_group(proj.layer, at);
  const int64_t i = &proj - table_.specs().data();
  return {dense_view(table_.at("embed_tokens_per_layer.weight")),
          buffer.flat_slice(at[size_t(i)], {proj.numel()}).view(proj.shape),
          dense_view(table_.at("per_layer_projection_norm.weight")), {}};
}

}  // namespace gemmax

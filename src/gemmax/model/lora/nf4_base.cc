#include "gemmax/model/lora/nf4_base.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gemmax/base/convert.h"
#include "gemmax/base/error.h"
#include "gemmax/base/nf4.h"
#include "gemmax/model/head.h"

namespace gemmax {

Nf4Layout Nf4Layout::of(const ParamTable& table, int64_t block) {
  GEMMAX_CHECK(block >= 2 && block % 2 == 0, "NF4 blocks hold an even number of elements, got ",
               block);
  Nf4Layout l;
  l.block = block;
  for (const ParamSpec& s : table.specs()) {
    const bool q = s.fsdp == FsdpRole::LayerMatrix;
    l.quantised.push_back(q);
    l.dense.push_back(q ? -1 : l.dense_total);
    l.codes.push_back(q ? l.code_bytes : -1);
    l.scales.push_back(q ? l.blocks : -1);
    if (q) {
      l.code_bytes += nf4_code_bytes(s.numel());
      l.blocks += nf4_blocks(s.numel(), block);
    } else {
      l.dense_total += s.numel();
    }
  }
  return l;
}

Nf4Base alloc_nf4_base(Backend& be, const ParamTable& table, DType act, int64_t block) {
  Nf4Base b;
  b.layout = Nf4Layout::of(table, block);
  b.dense = be.alloc({b.layout.dense_total}, act, MemKind::Params);
  b.codes = be.alloc({b.layout.code_bytes}, DType::U8, MemKind::Params);
  b.absmax = be.alloc({b.layout.blocks}, DType::F32, MemKind::Params);
  return b;
}

Nf4Filler::Nf4Filler(Backend& be, const ParamTable& table, Nf4Base& base)
    : be_(be), table_(table), base_(base) {
  // In place where the backend's buffers are host memory; else staged and uploaded by finish().
  auto host = [&](const Tensor& t) {
    const Tensor h = be.to_host(t);
    return h.shares_storage(t) ? h : Tensor::empty(t.shape(), t.dtype());
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
  Tensor x = Tensor::empty({n}, DType::F32);
  convert_into(values, x);
  // Whole blocks per thread: each writes its own code bytes and scales.
  const int64_t blocks = nf4_blocks(n, l.block), chunk = 1024;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks; b += chunk) {
    const int64_t begin = b * l.block, count = std::min(chunk * l.block, n - begin);
    nf4_quantize(x.data<float>() + begin, count, l.block,
                 codes_.data<uint8_t>() + l.codes[i] + begin / 2,
                 absmax_.data<float>() + l.scales[i] + b);
  }
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

ParamLocation Nf4Params::dequantise(const std::vector<const ParamSpec*>& specs,
                                    Tensor& buffer) const {
  int64_t n = 0;
  for (const ParamSpec* s : specs) n += s->numel();
  buffer = be_.alloc({n}, opt_.act, MemKind::Workspace);
  int64_t at = 0;
  for (const ParamSpec* s : specs) {
    const size_t i = size_t(s - table_.specs().data());
    const Nf4Layout& l = base_.layout;
    be_.dequantize_nf4(
        {.out = buffer.flat_slice(at, {s->numel()}),
         .codes = base_.codes.flat_slice(l.codes[i], {nf4_code_bytes(s->numel())}),
         .absmax = base_.absmax.flat_slice(l.scales[i], {nf4_blocks(s->numel(), l.block)}),
         .block = l.block});
    at += s->numel();
  }
  return {buffer, 0};
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
  std::vector<const ParamSpec*> matrices;
  std::vector<int64_t> at(table_.specs().size(), -1);
  int64_t n = 0;
  for (const ParamSpec& s : table_.specs()) {
    const size_t i = size_t(&s - table_.specs().data());
    if (s.layer != l || !base_.layout.quantised[i]) continue;
    matrices.push_back(&s);
    at[i] = n;
    n += s.numel();
  }
  Tensor buffer;
  dequantise(matrices, buffer);
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
  Tensor buffer;
  dequantise({&table_.at("per_layer_model_projection.weight")}, buffer);
  const ParamSpec& proj = table_.at("per_layer_model_projection.weight");
  return {dense_view(table_.at("embed_tokens_per_layer.weight")), buffer.view(proj.shape),
          dense_view(table_.at("per_layer_projection_norm.weight"))};
}

}  // namespace gemmax

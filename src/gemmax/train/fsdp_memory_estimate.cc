#include "gemmax/train/fsdp_memory_estimate.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "gemmax/base/strings.h"
#include "gemmax/model/params.h"
#include "gemmax/model/weights.h"

namespace gemmax {
namespace {

constexpr int64_t kInt = 4;  // int32 bytes

struct Bytes {
  int64_t a, s, w;  // one element of an activation, a statistic, a master weight
};

struct LayerActBytes {
  int64_t matmul = 0, all = 0;
};

// One layer's forward activations as attention.cc, layer.cc, mlp.cc and moe.cc allocated them
// before the step's plan was derived from the model itself: {matmul outputs, everything else}.
LayerActBytes layer_acts(const ModelConfig& c, int64_t l, int64_t B, int64_t S, const Bytes& z) {
  const int64_t T = B * S, D = c.d_model, H = c.num_heads, KV = c.layer_kv_heads(l);
  const int64_t Hh = H * c.layer_head_dim(l), Kh = KV * c.layer_head_dim(l);
  const int64_t Fs = c.mlp_dim, F = c.moe_mlp_dim, E = c.num_experts, K = c.num_experts_per_tok;
  const int64_t a = z.a, s = z.s;
  int64_t matmul = 0, other = 0;
  // attention: normed, rstd_in | q_raw, k_raw, v_raw (none on K = V layers) | q, k, v and
  // their rstd | attn, lse | proj | rstd_post, out
  other += T * D * a + T * s;
  matmul += T * Hh * a + T * Kh * a + (c.layer_has_v_proj(l) ? T * Kh * a : 0);
  other += T * Hh * a + 2 * T * Kh * a + T * H * s + 2 * T * KV * s;
  other += T * Hh * a + B * H * S * s;
  matmul += T * D * a;
  other += T * s + T * D * a;
  // layer: h, ffn_sum, ffn, rstd_ffw
  other += 3 * T * D * a + T * s;
  // dense MLP: normed, rstd_in | gate_up | act | proj | rstd_post, out
  other += T * D * a + T * s;
  matmul += T * 2 * Fs * a;
  other += T * Fs * a;
  matmul += T * D * a;
  other += T * s + T * D * a;
  // MoE: router_in, rstd_router | logits | probs, idx, weights | density | normed, rstd_in |
  // order, inverse, group_sizes | xs | gate_up | act | y | combined | rstd_post, out
  other += T * D * a + T * s;
  matmul += T * E * a;
  other += T * E * s + T * K * kInt + T * K * s;
  other += B * E * s;
  other += T * D * a + T * s;
  other += 2 * T * K * kInt + E * kInt;
  other += T * K * D * a;
  matmul += T * K * 2 * F * a;
  other += T * K * F * a;
  matmul += T * K * D * a;
  other += T * D * a;
  other += T * s + T * D * a;
  return {matmul, matmul + other};
}

// The largest set of temporaries live at once in layer_backward (layer.cc) and the block
// backwards it calls, which release each temporary once consumed.
int64_t backward_temporaries(const ModelConfig& c, int64_t l, int64_t B, int64_t S,
                             const Bytes& z) {
  const int64_t T = B * S, D = c.d_model, TK = T * c.num_experts_per_tok;
  const int64_t Hh = c.num_heads * c.layer_head_dim(l);
  const int64_t Kh = c.layer_kv_heads(l) * c.layer_head_dim(l);
  const int64_t Fs = c.mlp_dim, F = c.moe_mlp_dim, E = c.num_experts, a = z.a;
  // attention.cc: {dproj, dattn} {dattn, dq, dk, dv} {dq, dk, dv, dq_raw}
  //               {dk, dv, dq_raw, dk_raw} {dv, dq_raw, dk_raw, da (, dv_raw)}
  const int64_t attn = T * a *
                       std::max({D + Hh, 2 * Hh + 2 * Kh, Hh + 3 * Kh,
                                 Hh + 2 * Kh + D + (c.layer_has_v_proj(l) ? Kh : 0)});
  // mlp.cc: {dproj, dact} {dact, dgate_up} {dgate_up, dnormed}
  const int64_t mlp = T * a * std::max({D + Fs, 3 * Fs, 2 * Fs + D});
  // moe.cc: dweights lives from the combine to the router backward.
  const int64_t dw = TK * z.s;
  const int64_t moe = std::max({T * D * a + TK * D * a + dw,   // dcombined, dy
                                TK * D * a + TK * F * a + dw,  // dy, dact
                                TK * 3 * F * a + dw,           // dact, dgate_up
                                TK * (2 * F + D) * a + dw,     // dgate_up, dxs
                                TK * D * a + T * D * a + dw,   // dxs, dnormed
                                B * E * z.s + T * E * a + dw,  // lb_dprobs, dlogits
                                T * E * a + T * D * a});       // dlogits, drouter_in
  // layer.cc: {hf, ds}, then dh and dsum around the MLP and MoE, then dh around attention.
  return std::max({T * D * a + z.w, 2 * T * D * a + std::max(mlp, moe), T * D * a + attn});
}

std::string tensor_str(const std::vector<int64_t>& shape, DType dt) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "] " << dtype_name(dt);
  return os.str();
}

// One phase of the step: what is live in it besides the static categories.
struct Phase {
  std::string name;
  int64_t activations = 0;
  std::vector<MemoryPlan::Item> workspace;
  int64_t workspace_bytes() const {
    int64_t n = 0;
    for (const auto& i : workspace) n += i.bytes;
    return n;
  }
};

}  // namespace

MemoryPlan estimate_fsdp_memory(const MemoryPlanInput& in) {
  const ModelConfig& c = in.model;
  const ParamTable table(c);
  const Bytes z{int64_t(dtype_size(in.options.act)),
                int64_t(dtype_size(stat_dtype(in.options.act))), int64_t(dtype_size(in.weight))};
  const int64_t L = c.num_layers, B = in.batch, S = in.seq, T = B * S, D = c.d_model;
  const int64_t V = c.vocab_size, N = in.fsdp;
  const bool fsdp = N > 1;
  const std::string act = std::string(dtype_name(in.options.act)), wname(dtype_name(in.weight));
  MemoryPlan plan;
  plan.input = in;

  // Static: fp32 masters, gradients, Adam moments; FSDP shards all but the norm scales.
  int64_t local_params = 0, local_trained = 0;
  const std::vector<bool> trained = trainable_params(table, in.freeze);
  for (size_t i = 0; i < trained.size(); ++i) {
    const ParamSpec& s = table.specs()[i];
    const int64_t local = s.fsdp_axis >= 0 ? (s.numel() + N - 1) / N : s.numel();
    local_params += local;
    local_trained += trained[i] ? local : 0;
  }
  const std::string shard = fsdp ? " (1/" + std::to_string(N) + " FSDP shard)" : "";
  const std::string pcount = std::to_string(local_params) + " x " + wname + shard;
  std::vector<MemoryPlan::Item> items = {
      {MemKind::Params, "master weights: " + pcount, local_params * z.w},
      {MemKind::Grads, "gradients: " + pcount, local_params * z.w},
      {MemKind::OptState,
       "Adam mu and nu: 2 x " + std::to_string(local_trained) + " x " + wname + shard +
           (local_trained < local_params ? " (trained parameters only)" : ""),
       2 * local_trained * z.w},
      {MemKind::Data, "batch: 5 x " + tensor_str({T}, DType::I32), 5 * T * kInt},
      {MemKind::Data, "RoPE frequencies", (c.head_dim / 2 + c.global_head_dim / 2) * 8}};

  // Saved activations.
  std::vector<LayerActBytes> acts(L);
  std::vector<int64_t> kept(L);  // what the policy keeps of each layer
  int64_t kept_sum = 0;
  for (int64_t l = 0; l < L; ++l) {
    acts[l] = layer_acts(c, l, B, S, z);
    kept[l] = in.options.remat == RematPolicy::None      ? acts[l].all
              : in.options.remat == RematPolicy::Minimal ? acts[l].matmul
                                                         : 0;
    kept_sum += kept[l];
  }
  const int64_t x_bytes = T * D * z.a;
  items.push_back({MemKind::Activations,
                   "layer inputs x_0..x_" + std::to_string(L) + ": " + std::to_string(L + 1) +
                       " x " + tensor_str({T, D}, in.options.act),
                   (L + 1) * x_bytes});
  if (in.options.remat != RematPolicy::Full)
    items.push_back({MemKind::Activations,
                     in.options.remat == RematPolicy::None
                         ? "every activation of the " + std::to_string(L) + " layers (remat none)"
                         : "matmul outputs of the " + std::to_string(L) + " layers (remat minimal)",
                     kept_sum});

  // Compute-dtype weights of a layer: a bf16 copy of fp32 masters on one device; under FSDP
  // the all-gathered weights (cast, then gathered).
  auto layer_weights = [&](int64_t l) -> int64_t {
    if (l < 0 || l >= L) return 0;
    if (!fsdp && in.options.act == in.weight) return 0;
    return layer_matrix_params(c, l) * z.a;
  };
  const std::string weights_what = fsdp ? "all-gathered " + act + " weights of layer "
                                        : act + " compute copy of the weights of layer ";
  auto not_kept = [&](int64_t l) { return acts[l].all - kept[l]; };
  // The largest weight of each layer: its full-shape gradient exists before the reduce-scatter.
  std::vector<int64_t> largest_weight(L, 0);
  for (const ParamSpec& s : table.specs())
    if (s.layer >= 0) largest_weight[s.layer] = std::max(largest_weight[s.layer], s.numel());

  std::vector<Phase> phases;
  int64_t inputs_kept = 0;  // sum of kept[j] for j < l
  for (int64_t l = 0; l < L; ++l) {
    const std::string ls = std::to_string(l) + (c.is_global(l) ? " (global)" : "");
    Phase f{"forward of layer " + ls, (l + 2) * x_bytes + inputs_kept + kept[l], {}};
    f.workspace.push_back({MemKind::Workspace, weights_what + ls, layer_weights(l)});
    if (fsdp)
      f.workspace.push_back(
          {MemKind::Workspace, "prefetched weights of the next layer", layer_weights(l + 1)});
    f.workspace.push_back(
        {MemKind::Workspace, "its activations the policy does not keep", not_kept(l)});
    phases.push_back(f);

    Phase b{"backward of layer " + ls, (l + 1) * x_bytes + inputs_kept + kept[l], {}};
    b.workspace.push_back({MemKind::Workspace,
                           "dx, dx_prev: 2 x " + tensor_str({T, D}, in.options.act), 2 * x_bytes});
    b.workspace.push_back({MemKind::Workspace, weights_what + ls, layer_weights(l)});
    if (fsdp) {
      b.workspace.push_back(
          {MemKind::Workspace, "prefetched weights of the previous layer", layer_weights(l - 1)});
      b.workspace.push_back(
          {MemKind::Workspace,
           "full-shape " + wname + " gradient of its largest weight before the reduce-scatter",
           largest_weight[l] * z.w});
    }
    b.workspace.push_back(
        {MemKind::Workspace, "its activations recomputed for the backward", not_kept(l)});
    b.workspace.push_back({MemKind::Workspace, "backward temporaries (largest live set)",
                           backward_temporaries(c, l, B, S, z)});
    phases.push_back(b);
    inputs_kept += kept[l];
  }
  {
    const int64_t C = T / in.options.num_vocab_tiling;
    Phase h{"output head", (L + 1) * x_bytes + kept_sum, {}};
    h.workspace.push_back(
        {MemKind::Workspace, "dx: " + tensor_str({T, D}, in.options.act), x_bytes});
    if (fsdp)
      h.workspace.push_back({MemKind::Workspace, act + " copy of the vocabulary-sharded table",
                             (V + N - 1) / N * D * z.a});
    else if (in.options.act != in.weight)
      h.workspace.push_back({MemKind::Workspace,
                             act + " copy of the table " + tensor_str({V, D}, in.options.act),
                             V * D * z.a});
    h.workspace.push_back({MemKind::Workspace,
                           "one vocabulary tile of logits " + tensor_str({C, V}, in.options.act),
                           C * V * z.a});
    h.workspace.push_back({MemKind::Workspace,
                           "tile buffers: y, dy " + tensor_str({C, D}, in.options.act) +
                               ", rstd, targets, mask [" + std::to_string(C) + "]",
                           2 * C * D * z.a + C * z.s + 2 * C * kInt});
    phases.push_back(h);
  }

  {
    const Phase *fwd = nullptr, *bwd = nullptr;
    for (const Phase& p : phases) {
      const bool is_fwd = p.name.starts_with("forward");
      if (p.name.starts_with("output")) continue;
      const Phase*& best = is_fwd ? fwd : bwd;
      if (!best || p.workspace_bytes() > best->workspace_bytes()) best = &p;
    }
    const Phase& head = phases.back();
    std::ostringstream os;
    const MemoryPlan::Item& tile = head.workspace[head.workspace.size() - 2];
    os << "forward " << format_bytes(double(fwd->workspace_bytes())) << " ("
       << fwd->name.substr(std::string("forward of ").size()) << ") | head "
       << format_bytes(double(head.workspace_bytes())) << " (" << tile.what << ": "
       << format_bytes(double(tile.bytes)) << ") | backward "
       << format_bytes(double(bwd->workspace_bytes())) << " ("
       << bwd->name.substr(std::string("backward of ").size()) << ")";
    plan.workspace_by_phase = os.str();
  }
  const Phase* ws_peak = &phases[0];
  const Phase* total_peak = &phases[0];
  for (const Phase& p : phases) {
    if (p.workspace_bytes() > ws_peak->workspace_bytes()) ws_peak = &p;
    if (p.activations + p.workspace_bytes() >
        total_peak->activations + total_peak->workspace_bytes())
      total_peak = &p;
    plan.peak[size_t(MemKind::Activations)] =
        std::max(plan.peak[size_t(MemKind::Activations)], p.activations);
  }
  for (const auto& i : ws_peak->workspace)
    if (i.bytes > 0) items.push_back(i);
  plan.peak_phase[size_t(MemKind::Workspace)] = ws_peak->name;
  plan.total_phase = total_peak->name;
  plan.estimate = true;
  plan.peak[size_t(MemKind::Workspace)] = ws_peak->workspace_bytes();
  int64_t fixed = 0;
  for (const auto& i : items) {
    if (i.kind == MemKind::Activations || i.kind == MemKind::Workspace) continue;
    plan.peak[size_t(i.kind)] += i.bytes;
    fixed += i.bytes;
  }
  plan.peak_total = fixed + total_peak->activations + total_peak->workspace_bytes();
  plan.items = std::move(items);
  return plan;
}

}  // namespace gemmax

"""Independent PyTorch reference of the Gemma-4 text decoder and its training loss.

Written from docs/MODEL.md and docs/TRAINING.md (not from gemmax's C++). It reads a Hugging
Face folder (config.json + safetensors), runs the forward in float64 (or float32), computes
    total = masked-mean cross-entropy + load-balance loss
and returns d total / d parameter for every parameter, keyed by its HF name.

Runs on torch >= 1.13 and numpy; no transformers, no safetensors package.

CLI:
  /usr/bin/python3 gemma4_ref.py --model DIR --tokens FILE --batch B --out GRADS.safetensors \
      [--logits LOGITS.safetensors] [--dtype float64|float32] [--lb-weight 0.001]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402

DEFAULT_LB_WEIGHT = 0.001  # load_balance_loss_weight of the 26B-A4B recipe (docs/TRAINING.md §7)

# ----------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------

# Defaults of transformers' Gemma4TextConfig for the keys this reference reads; a config.json
# that omits a key means the default.
_HF_DEFAULTS = {
    "sliding_window": 512, "rms_norm_eps": 1e-6, "final_logit_softcapping": None,
    "attention_k_eq_v": False, "num_global_key_value_heads": None, "global_head_dim": 512,
    "enable_moe_block": False, "tie_word_embeddings": True, "hidden_size_per_layer_input": 256,
    "num_kv_shared_layers": 0, "use_double_wide_mlp": False, "attention_bias": False,
    "hidden_activation": "gelu_pytorch_tanh", "use_bidirectional_attention": None,
    "layer_types": None, "rope_parameters": None,
}
_HF_DEFAULT_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                       "rope_theta": 1000000.0},
}


class Config:
    """The text decoder's hyper-parameters, resolved from an HF config.json dict."""

    def __init__(self, raw, layer_types=None):
        # The multimodal Gemma4Config nests the decoder under text_config; the text-only
        # Gemma4TextConfig (model_type gemma4_text) is flat.
        tc = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
        g = lambda k: tc.get(k, _HF_DEFAULTS[k]) if k in _HF_DEFAULTS else tc[k]  # noqa: E731
        self.V, self.D, self.L = g("vocab_size"), g("hidden_size"), g("num_hidden_layers")
        self.H, self.hd, self.Fs = g("num_attention_heads"), g("head_dim"), g("intermediate_size")
        self.kv_local = g("num_key_value_heads")
        self.k_eq_v = bool(g("attention_k_eq_v"))
        # HF applies num_global_key_value_heads only together with attention_k_eq_v; without
        # K=V the global layers keep num_key_value_heads (Gemma4TextConfig.__post_init__).
        ng = g("num_global_key_value_heads")
        self.kv_global = ng if (self.k_eq_v and ng is not None) else self.kv_local
        self.hd_global = g("global_head_dim")
        self.eps = float(g("rms_norm_eps"))
        self.window = g("sliding_window")
        self.softcap = g("final_logit_softcapping")
        # enable_moe_block false: the dense layer (gemma4-31b), the GeGLU MLP alone.
        self.moe = bool(g("enable_moe_block"))
        self.E, self.K, self.F = g("num_experts"), g("top_k_experts"), g("moe_intermediate_size")
        # Gemma4's HF router always renormalises the top-k weights; the key is not part of the
        # HF config, it is read only so that a test config can switch it off.
        self.norm_topk_prob = bool(tc.get("norm_topk_prob", True))
        lt = layer_types or g("layer_types")
        if lt is None:  # HF default pattern: every 6th layer global
            lt = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(self.L)]
        if len(lt) != self.L or any(t not in ("sliding_attention", "full_attention") for t in lt):
            raise ValueError("layer_types must list %d sliding_attention/full_attention"
                             % self.L)
        self.layer_types = list(lt)
        self.rope = g("rope_parameters") or _HF_DEFAULT_ROPE
        # The small block (gemma4-e2b/e4b): per-layer inputs of width P from a second embedding
        # table, the last num_kv_shared_layers layers reading the K/V of the last earlier layer of
        # their kind, and those layers' MLP twice as wide with use_double_wide_mlp.
        self.P = g("hidden_size_per_layer_input") or 0
        self.Vp = tc.get("vocab_size_per_layer_input", 262144) if self.P else 0
        self.kv_shared = g("num_kv_shared_layers") or 0
        self.double_wide = bool(g("use_double_wide_mlp"))
        self._check_supported(g)

    def _check_supported(self, g):
        unsupported = [
            (self.P and self.Vp < self.V, "vocab_size_per_layer_input < vocab_size"),
            (self.kv_shared >= self.L, "num_kv_shared_layers = num_hidden_layers"),
            (bool(g("attention_bias")), "attention_bias"),
            (g("hidden_activation") != "gelu_pytorch_tanh", "activations other than tanh GELU"),
            (g("use_bidirectional_attention") == "all", "use_bidirectional_attention='all'"),
            (not g("tie_word_embeddings"), "untied embeddings"),
        ]
        for bad, what in unsupported:
            if bad:
                raise NotImplementedError("gemma4_ref does not support " + what)
        for t in set(self.layer_types):
            if t not in self.rope:
                raise ValueError("rope_parameters has no entry for " + t)
        for l in range(self.L):
            if self.kv_shared_layer(l) and self.kv_donor(l) is None:
                raise ValueError("layer %d shares K/V but no earlier layer is %s"
                                 % (l, self.layer_types[l]))

    def kv_shared_layer(self, l):
        """Layer l reuses an earlier layer's K/V (it has no k/v projections or norms)."""
        return self.kv_shared > 0 and l >= self.L - self.kv_shared

    def kv_donor(self, l):
        """The last layer of l's kind before the first K/V-sharing layer (HF's 'store')."""
        first = self.L - self.kv_shared
        return next((j for j in range(first - 1, -1, -1)
                     if self.layer_types[j] == self.layer_types[l]), None)

    def mlp_dim(self, l):
        return self.Fs * (2 if self.double_wide and self.kv_shared_layer(l) else 1)

    def is_global(self, l):
        return self.layer_types[l] == "full_attention"

    def layer_dims(self, l):
        """(kv heads, head dim, has v_proj) of layer l."""
        if self.is_global(l):
            return self.kv_global, self.hd_global, not self.k_eq_v
        return self.kv_local, self.hd, True

    def inv_freq(self, l, dtype):
        """RoPE inverse frequencies [hd/2] of layer l (docs/MODEL.md §4.2-4.3).

        'default': theta^(-2i/hd) for all hd/2 pairs. 'proportional': the first
        int(factor*hd//2) pairs use theta^(-2i/hd) (denominator is the full hd), the rest 0,
        i.e. unrotated; pairs are (i, i+hd/2) in both cases.
        """
        p = self.rope[self.layer_types[l]]
        hd = self.layer_dims(l)[1]
        theta = float(p.get("rope_theta", 10000.0))
        kind = p.get("rope_type", "default")
        i = torch.arange(hd // 2, dtype=torch.float64)
        inv = theta ** (-2.0 * i / hd)
        if kind == "proportional":
            n_rot = int(float(p.get("partial_rotary_factor", 1.0)) * hd // 2)
            inv[n_rot:] = 0.0
            inv = inv / float(p.get("factor", 1.0))
        elif kind == "default":
            if float(p.get("partial_rotary_factor", 1.0)) != 1.0:
                raise NotImplementedError("partial_rotary_factor with rope_type 'default'")
        else:
            raise NotImplementedError("rope_type " + kind)
        return inv.to(dtype)

    def param_shapes(self):
        """{name relative to the prefix: shape} of every text-decoder parameter
        (docs/MODEL.md §5)."""
        D, H, E, F, Fs = self.D, self.H, self.E, self.F, self.Fs
        s = {"embed_tokens.weight": (self.V, D), "norm.weight": (D,)}
        if self.P:
            s["embed_tokens_per_layer.weight"] = (self.Vp, self.L * self.P)
            s["per_layer_model_projection.weight"] = (self.L * self.P, D)
            s["per_layer_projection_norm.weight"] = (self.P,)
        for l in range(self.L):
            kv, hd, has_v = self.layer_dims(l)
            p = "layers.%d." % l
            own_kv = not self.kv_shared_layer(l)
            s[p + "self_attn.q_proj.weight"] = (H * hd, D)
            if own_kv:
                s[p + "self_attn.k_proj.weight"] = (kv * hd, D)
            if has_v and own_kv:
                s[p + "self_attn.v_proj.weight"] = (kv * hd, D)
            s[p + "self_attn.o_proj.weight"] = (D, H * hd)
            s[p + "self_attn.q_norm.weight"] = (hd,)
            if own_kv:
                s[p + "self_attn.k_norm.weight"] = (hd,)
            norms = ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"]
            if self.moe:
                norms += ["post_feedforward_layernorm_1", "pre_feedforward_layernorm_2",
                          "post_feedforward_layernorm_2"]
            for n in norms:
                s[p + n + ".weight"] = (D,)
            Fl = self.mlp_dim(l)
            s[p + "mlp.gate_proj.weight"] = (Fl, D)
            s[p + "mlp.up_proj.weight"] = (Fl, D)
            s[p + "mlp.down_proj.weight"] = (D, Fl)
            if self.P:
                s[p + "per_layer_input_gate.weight"] = (self.P, D)
                s[p + "per_layer_projection.weight"] = (D, self.P)
                s[p + "post_per_layer_input_norm.weight"] = (D,)
            if self.moe:
                s[p + "router.proj.weight"] = (E, D)
                s[p + "router.scale"] = (D,)
                s[p + "router.per_expert_scale"] = (E,)
                s[p + "experts.gate_up_proj"] = (E, 2 * F, D)
                s[p + "experts.down_proj"] = (E, D, F)
            s[p + "layer_scalar"] = (1,)
        return s


def read_config_json(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def text_prefix(names):
    """`model.language_model.` in a multimodal checkpoint, `model.` in a text-only one."""
    if any(n.startswith("model.language_model.") for n in names):
        return "model.language_model."
    if any(n.startswith("model.") for n in names):
        return "model."
    raise ValueError("no tensor under model. or model.language_model.")


def load_model(model_dir, dtype=torch.float64, layer_types=None):
    """Returns (cfg, params {short name: leaf tensor requiring grad}, prefix, skipped names)."""
    cfg = Config(read_config_json(model_dir), layer_types)
    tensors = safetensors_np.load_folder(model_dir)
    prefix = text_prefix(tensors)
    # Everything outside the text prefix (vision/audio towers, embedders) is not ours.
    mine = {n[len(prefix):]: a for n, a in tensors.items() if n.startswith(prefix)}
    skipped = sorted(n for n in tensors if not n.startswith(prefix))
    want = cfg.param_shapes()
    missing = sorted(set(want) - set(mine))
    extra = sorted(set(mine) - set(want))
    if missing or extra:
        raise ValueError("%s: missing %s; unexpected %s" % (model_dir, missing[:5], extra[:5]))
    params = {}
    for n, shape in want.items():
        if tuple(mine[n].shape) != tuple(shape):
            raise ValueError("%s%s has shape %s, expected %s" % (prefix, n, mine[n].shape, shape))
        params[n] = torch.tensor(np.asarray(mine[n], dtype=np.float64), dtype=dtype,
                                 requires_grad=True)
    return cfg, params, prefix, skipped


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    """x * (mean(x^2) + eps)^-1/2 * w over the last axis; w used as stored (no 1 + w)."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def rope(x, pos, inv_freq):
    """Split-half RoPE: pairs (i, i + hd/2). x [B,S,n,hd], pos [B,S]."""
    ang = pos.to(inv_freq.dtype)[:, :, None, None] * inv_freq  # [B,S,1,hd/2]
    c, s = torch.cos(ang), torch.sin(ang)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def attention_masks(cfg, B, S, segments, device):
    """Boolean [B,1,S,S] allowed(i,j) for full and for sliding layers (docs/MODEL.md §4.4)."""
    i = torch.arange(S, device=device)[:, None]
    j = torch.arange(S, device=device)[None, :]
    causal = (j <= i)[None, None]
    same = (segments[:, None, :, None] == segments[:, None, None, :])
    full = causal & same
    sliding = full & (j > i - cfg.window)[None, None]
    return full, sliding


def attention(P, cfg, l, a, pos, mask, shared_kv):
    """shared_kv {layer: (k, v)}: a K/V-sharing layer reads its donor's, a donor stores its own."""
    B, S, _ = a.shape
    p = "layers.%d.self_attn." % l
    kv, hd, has_v = cfg.layer_dims(l)
    q = (a @ P[p + "q_proj.weight"].t()).view(B, S, cfg.H, hd)
    inv = cfg.inv_freq(l, a.dtype)
    q = rope(rms_norm(q, P[p + "q_norm.weight"], cfg.eps), pos, inv)
    if cfg.kv_shared_layer(l):
        k, v = shared_kv[cfg.kv_donor(l)]
    else:
        kr = (a @ P[p + "k_proj.weight"].t()).view(B, S, kv, hd)
        # K=V global layers: the value is the raw k projection (before k_norm and RoPE).
        vr = (a @ P[p + "v_proj.weight"].t()).view(B, S, kv, hd) if has_v else kr
        k = rope(rms_norm(kr, P[p + "k_norm.weight"], cfg.eps), pos, inv)
        v = rms_norm(vr, None, cfg.eps)
        shared_kv[l] = (k, v)
    grp = cfg.H // kv  # query head h reads kv head h // grp
    k = k.repeat_interleave(grp, dim=2)
    v = v.repeat_interleave(grp, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k)  # scale 1.0, no soft-cap
    s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    o = torch.einsum("bhij,bjhd->bihd", w, v).reshape(B, S, cfg.H * hd)
    return o @ P[p + "o_proj.weight"].t()


def route(P, cfg, l, h):
    """Router (docs/MODEL.md §4.6). h [T,D] -> full softmax p [T,E], idx [T,K], weights w [T,K]."""
    p = "layers.%d.router." % l
    z = rms_norm(h, None, cfg.eps) * P[p + "scale"] * (cfg.D ** -0.5)
    logits = z @ P[p + "proj.weight"].t()
    probs = torch.softmax(logits, dim=-1)
    # top-k by logit; a stable descending sort puts the lower expert id first among ties.
    idx = torch.sort(logits.detach(), dim=-1, descending=True, stable=True).indices[:, :cfg.K]
    w = probs.gather(1, idx)
    if cfg.norm_topk_prob:
        w = w / w.sum(-1, keepdim=True)
    w = w * P[p + "per_expert_scale"][idx]
    return logits, probs, idx, w


def experts(P, cfg, l, x, idx, w):
    """m[t] = sum_j w[t,j] * Expert_{idx[t,j]}(x[t]), one expert at a time over its tokens."""
    gu_all = P["layers.%d.experts.gate_up_proj" % l]  # [E, 2F, D], gate rows first
    dn_all = P["layers.%d.experts.down_proj" % l]  # [E, D, F]
    m = torch.zeros_like(x)
    for e in range(cfg.E):
        hit = idx == e  # [T,K]; an expert appears at most once per token
        rows = hit.any(-1).nonzero().flatten()
        if rows.numel() == 0:
            continue
        coef = (w * hit.to(w.dtype)).sum(-1)[rows]
        gu = x[rows] @ gu_all[e].t()
        a = gelu_tanh(gu[:, :cfg.F]) * gu[:, cfg.F:]
        m = m.index_add(0, rows, (a @ dn_all[e].t()) * coef[:, None])
    return m


def per_layer_inputs(P, cfg, inputs, x):
    """The small block's per-layer inputs [B,S,L,P] from the token ids and the scaled embedding x:
    (table row * sqrt(P) + RMSNorm(x . W^T / sqrt(D))) / sqrt(2)."""
    B, S = inputs.shape
    ident = (P["embed_tokens_per_layer.weight"][inputs] * math.sqrt(cfg.P)).view(B, S, cfg.L, cfg.P)
    ctx = (x @ P["per_layer_model_projection.weight"].t()) * (cfg.D ** -0.5)
    ctx = rms_norm(ctx.view(B, S, cfg.L, cfg.P), P["per_layer_projection_norm.weight"], cfg.eps)
    return (ident + ctx) * (2.0 ** -0.5)


def decoder_layer(P, cfg, l, x, pos, mask, shared_kv, pli):
    p = "layers.%d." % l
    n = lambda t, name: rms_norm(t, P[p + name + ".weight"], cfg.eps)  # noqa: E731
    B, S, D = x.shape
    h = x + n(attention(P, cfg, l, n(x, "input_layernorm"), pos, mask, shared_kv),
              "post_attention_layernorm")
    # dense GeGLU MLP
    a = n(h, "pre_feedforward_layernorm")
    d = (gelu_tanh(a @ P[p + "mlp.gate_proj.weight"].t()) * (a @ P[p + "mlp.up_proj.weight"].t())) \
        @ P[p + "mlp.down_proj.weight"].t()
    def out(y):
        if cfg.P:  # the small block: the layer's per-layer input, gated by y
            g = gelu_tanh(y @ P[p + "per_layer_input_gate.weight"].t()) * pli[:, :, l, :]
            y = y + n(g @ P[p + "per_layer_projection.weight"].t(), "post_per_layer_input_norm")
        return y * P[p + "layer_scalar"]

    if not cfg.moe:  # the dense layer: no post_feedforward_layernorm_1, no router stats
        return out(h + n(d, "post_feedforward_layernorm")), {}
    d = n(d, "post_feedforward_layernorm_1")
    # routed MoE: the router reads h itself, the experts read a separately normalised h
    hf = h.reshape(B * S, D)
    logits, probs, idx, w = route(P, cfg, l, hf)
    m = experts(P, cfg, l, n(hf, "pre_feedforward_layernorm_2"), idx, w).view(B, S, D)
    m = n(m, "post_feedforward_layernorm_2")
    f = n(d + m, "post_feedforward_layernorm")
    return out(h + f), dict(logits=logits.view(B, S, -1), probs=probs.view(B, S, -1),
                     idx=idx.view(B, S, -1))


def forward(P, cfg, inputs, positions=None, segments=None):
    """inputs [B,S] int64. Returns logits [B,S,V] and per-layer router stats."""
    B, S = inputs.shape
    emb = P["embed_tokens.weight"]
    if positions is None:
        positions = torch.arange(S).expand(B, S)
    if segments is None:
        segments = torch.ones(B, S, dtype=torch.long)
    full, sliding = attention_masks(cfg, B, S, segments, inputs.device)
    x = emb[inputs] * math.sqrt(cfg.D)
    pli = per_layer_inputs(P, cfg, inputs, x) if cfg.P else None
    stats, shared_kv = [], {}
    for l in range(cfg.L):
        x, st = decoder_layer(P, cfg, l, x, positions, full if cfg.is_global(l) else sliding,
                              shared_kv, pli)
        stats.append(st)
    logits = rms_norm(x, P["norm.weight"], cfg.eps) @ emb.t()  # tied head
    if cfg.softcap:
        logits = cfg.softcap * torch.tanh(logits / cfg.softcap)
    return logits, stats


def ce_loss(logits, targets, mask):
    """sum(xent * mask) / (sum(mask) + 1e-8) (docs/TRAINING.md §9)."""
    logp = torch.log_softmax(logits, dim=-1)
    xent = -logp.gather(-1, targets[..., None])[..., 0]
    mask = mask.to(logits.dtype)
    return (xent * mask).sum() / (mask.sum() + 1e-8)


def lb_loss(stats, cfg, weight):
    """Per-sequence load-balance loss, mean over layers (docs/TRAINING.md §7, docs/MODEL.md
    §4.7)."""
    per_layer = []
    for st in stats:
        probs, idx = st["probs"], st["idx"]  # [B,S,E], [B,S,K]
        hits = torch.zeros_like(probs).scatter_(-1, idx, 1.0)  # constant: no gradient
        density = hits.mean(1)  # [B,E]
        pbar = probs.mean(1)  # [B,E]
        per_layer.append(weight * cfg.E * cfg.E * (density * pbar).mean())
    return torch.stack(per_layer).mean()


def positions_from_segments(segments):
    """Positions restarting at 0 where the segment id changes along the row."""
    seg = np.asarray(segments)
    pos = np.zeros(seg.shape, dtype=np.int64)
    for b in range(seg.shape[0]):
        for s in range(1, seg.shape[1]):
            pos[b, s] = pos[b, s - 1] + 1 if seg[b, s] == seg[b, s - 1] else 0
    return pos


def compute(cfg, params, tokens, lb_weight=DEFAULT_LB_WEIGHT, segment_ids=None, positions=None):
    """Forward + losses on tokens [B,S+1] (inputs [:, :-1], targets [:, 1:]).

    Packed rows: segment_ids [B,S+1] (0 = padding) aligned with tokens; positions [B,S+1]
    default to restarting at 0 per segment. The loss mask is targets' segment != 0, so a
    document's last token predicting the next packed document's first token counts
    (docs/TRAINING.md §9). Without segment_ids every target counts and positions are 0..S-1.
    """
    tokens = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
    if tokens.dim() != 2 or tokens.shape[1] < 2:
        raise ValueError("tokens must be [B, S+1] with S >= 1")
    if int(tokens.min()) < 0 or int(tokens.max()) >= cfg.V:
        raise ValueError("token id out of range [0, %d)" % cfg.V)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    if segment_ids is None:
        seg = None
        pos = None if positions is None else torch.as_tensor(np.asarray(positions))[:, :-1]
        mask = torch.ones(targets.shape, dtype=torch.bool)
    else:
        seg_all = torch.as_tensor(np.asarray(segment_ids, dtype=np.int64))
        if positions is None:
            positions = positions_from_segments(seg_all.numpy())
        pos = torch.as_tensor(np.asarray(positions, dtype=np.int64))[:, :-1]
        seg, mask = seg_all[:, :-1], seg_all[:, 1:] != 0
    logits, stats = forward(params, cfg, inputs, pos, seg)
    ce = ce_loss(logits, targets, mask)
    lb = lb_loss(stats, cfg, lb_weight) if lb_weight and cfg.moe else logits.new_zeros(())
    return dict(logits=logits, ce_loss=ce, lb_loss=lb, total_loss=ce + lb, stats=stats)


def run(model_dir, tokens, dtype=torch.float64, lb_weight=DEFAULT_LB_WEIGHT, segment_ids=None,
        positions=None, layer_types=None):
    """Loads model_dir, computes the losses on tokens [B,S+1] and d total_loss / d params.

    Returns dict(logits [B,S,V], ce_loss, lb_loss, total_loss (python floats),
    grads {full HF name: tensor}, router [per-layer stats], prefix, skipped names).
    """
    cfg, params, prefix, skipped = load_model(model_dir, dtype, layer_types)
    out = compute(cfg, params, tokens, lb_weight, segment_ids, positions)
    out["total_loss"].backward()
    grads = {prefix + n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach()
             for n, p in params.items()}
    return dict(logits=out["logits"].detach(), ce_loss=out["ce_loss"].item(),
                lb_loss=out["lb_loss"].item(), total_loss=out["total_loss"].item(),
                grads=grads, router=[{k: v.detach() for k, v in st.items()} for st in out["stats"]],
                prefix=prefix, skipped=skipped, config=cfg)


def read_tokens(path, batch):
    """Little-endian int32 file of shape [batch, S+1]."""
    flat = np.fromfile(path, dtype="<i4")
    if batch <= 0 or flat.size % batch or flat.size // batch < 2:
        raise ValueError("%s: %d int32 values do not form [%d, S+1>=2]" % (path, flat.size, batch))
    return flat.reshape(batch, -1).astype(np.int64)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF folder: config.json + safetensors")
    ap.add_argument("--tokens", required=True, help="little-endian int32 [batch, S+1]")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--out", required=True, help="gradients, safetensors, under the HF names")
    ap.add_argument("--logits", help="also write logits [B,S,V] here (safetensors, key 'logits')")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--lb-weight", type=float, default=DEFAULT_LB_WEIGHT)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (1 is fastest for test-sized models)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    r = run(a.model, read_tokens(a.tokens, a.batch), dtype, a.lb_weight)
    safetensors_np.save_file({n: g.numpy() for n, g in r["grads"].items()}, a.out)
    if a.logits:
        safetensors_np.save_file({"logits": r["logits"].numpy()}, a.logits)
    print(json.dumps({k: r[k] for k in ("ce_loss", "lb_loss", "total_loss")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

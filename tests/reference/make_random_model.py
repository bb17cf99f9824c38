"""Writes a random tiny Gemma-4 HF folder (config.json + model.safetensors) and a tokens file.

The folder is in the exact format transformers reads: text-only `Gemma4ForCausalLM`
(model_type gemma4_text, tensors under `model.`), or with --multimodal the
`Gemma4ForConditionalGeneration` form (model_type gemma4, nested text_config, tensors under
`model.language_model.` plus a few dummy vision-tower tensors a text engine must skip).

All norm scales, router.scale, router.per_expert_scale and layer_scalar are random and
non-unit, so a wrong (1 + w) or a forgotten scale shows up. Tokens are drawn so that no token
in any layer has a near-tie at the router's top-k boundary (checked with the reference), which
keeps the expert choice identical across fp32/fp64 and across implementations.

  /usr/bin/python3 make_random_model.py --preset NAME --out DIR
  /usr/bin/python3 make_random_model.py --layers 3 --pattern SSG --d-model 33 ... --out DIR
  /usr/bin/python3 make_random_model.py --list
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gemma4_ref  # noqa: E402
import safetensors_np  # noqa: E402

BASE = dict(seed=0, layers=6, pattern="SSSSSG", d_model=32, heads=4, kv_heads=2,
            global_kv_heads=1, head_dim=8, global_head_dim=16, mlp_dim=48, experts=8, top_k=2,
            expert_dim=12, vocab=131, window=5, seq=16, batch=2, k_eq_v=True,
            local_theta=10000.0, global_theta=1000000.0, partial_rotary=0.25, softcap=30.0,
            multimodal=False, per_layer_dim=0, kv_shared=0, double_wide=False)

# Each preset changes BASE. Together they cover: sliding-only and sliding+global; E/top-k of
# 8/2, 4/1 (top-1), 6/3 and 16/8 (top-k = E/2); odd sizes (odd d_model, expert hidden and
# vocab not multiples of 8/64, head groups of 3); windows shorter than the sequence; K=V on
# and off; the multimodal folder form; the dense layer of gemma4-31b (no MoE block); the small
# block of gemma4-e2b (per-layer inputs, K/V shared by the last layers, their MLP double-wide)
# and of gemma4-e4b (the same with MLPs of one width).
PRESETS = {
    "base": dict(),
    "top1": dict(seed=1, layers=3, pattern="SSG", d_model=24, heads=2, kv_heads=1,
                 head_dim=8, global_head_dim=8, mlp_dim=40, experts=4, top_k=1,
                 expert_dim=10, vocab=97, window=4, seq=12, k_eq_v=False),
    "odd_sizes": dict(seed=2, layers=3, pattern="SSG", d_model=33, heads=3, kv_heads=1,
                      global_kv_heads=3, head_dim=6, global_head_dim=10, mlp_dim=45, experts=6,
                      top_k=3, expert_dim=13, vocab=203, window=7, seq=20, batch=3),
    "kv_separate": dict(seed=3, layers=4, pattern="SG", d_model=40, heads=4, kv_heads=2,
                        global_kv_heads=None, head_dim=10, global_head_dim=12, mlp_dim=36,
                        experts=16, top_k=4, expert_dim=20, vocab=250, window=6, seq=18,
                        k_eq_v=False, partial_rotary=0.5),
    "topk_half": dict(seed=4, layers=2, pattern="SG", d_model=20, heads=2, kv_heads=2,
                      global_kv_heads=1, head_dim=8, global_head_dim=8, mlp_dim=24, experts=16,
                      top_k=8, expert_dim=9, vocab=67, window=3, seq=10, batch=2),
    "multimodal": dict(seed=5, multimodal=True),
    # gemma4-31b's dense layer (enable_moe_block false): the MLP alone, no router or experts.
    "dense": dict(seed=7, layers=4, pattern="SSSG", d_model=36, heads=4, kv_heads=2,
                  global_kv_heads=1, head_dim=8, global_head_dim=12, mlp_dim=52, experts=1,
                  vocab=151, window=6, seq=14),
    # gemma4-e2b's block: 6 layers, the last 3 reading the K/V of layers 1 (S) and 2 (G).
    "small_e2b": dict(seed=8, layers=6, pattern="SSG", d_model=24, heads=4, kv_heads=1,
                      head_dim=8, global_head_dim=12, mlp_dim=20, experts=1, k_eq_v=False,
                      vocab=113, window=5, seq=14, per_layer_dim=6, kv_shared=3,
                      double_wide=True),
    "small_e4b": dict(seed=9, layers=4, pattern="SG", d_model=20, heads=2, kv_heads=2,
                      head_dim=6, global_head_dim=10, mlp_dim=28, experts=1, k_eq_v=False,
                      vocab=89, window=4, seq=12, per_layer_dim=5, kv_shared=2),
}

# Router top-k margin required for every token in every layer, relative to max(1, |logits|):
# far above fp32 rounding (~1e-7) and the ~1e-6 forward differences between implementations.
MIN_MARGIN = 1e-3


def text_config(o):
    L = o["layers"]
    pat = o["pattern"]
    types = ["full_attention" if pat[i % len(pat)] == "G" else "sliding_attention"
             for i in range(L)]
    return {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attention_k_eq_v": bool(o["k_eq_v"]),
        "bos_token_id": 2,
        "dtype": "float32",
        "enable_moe_block": o["experts"] > 1,
        "eos_token_id": 1,
        "final_logit_softcapping": o["softcap"],
        "global_head_dim": o["global_head_dim"],
        "head_dim": o["head_dim"],
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": o["d_model"],
        "hidden_size_per_layer_input": o["per_layer_dim"],
        "initializer_range": 0.02,
        "intermediate_size": o["mlp_dim"],
        "layer_types": types,
        "max_position_embeddings": 4096,
        "moe_intermediate_size": o["expert_dim"] if o["experts"] > 1 else None,
        "num_attention_heads": o["heads"],
        "num_experts": o["experts"] if o["experts"] > 1 else None,
        "num_global_key_value_heads": o["global_kv_heads"] if o["k_eq_v"] else None,
        "num_hidden_layers": L,
        "num_key_value_heads": o["kv_heads"],
        "num_kv_shared_layers": o["kv_shared"],
        "pad_token_id": 0,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": o["partial_rotary"],
                               "rope_theta": o["global_theta"], "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": o["local_theta"], "rope_type": "default"},
        },
        "sliding_window": o["window"],
        "tie_word_embeddings": True,
        "top_k_experts": o["top_k"] if o["experts"] > 1 else None,
        "use_bidirectional_attention": None,
        "use_cache": True,
        "use_double_wide_mlp": bool(o["double_wide"]),
        "vocab_size": o["vocab"],
        "vocab_size_per_layer_input": o["vocab"],
        "transformers_version": "5.5.0",
    }


def full_config(o):
    tc = text_config(o)
    if not o["multimodal"]:
        return tc
    tc = {k: v for k, v in tc.items() if k not in ("architectures", "transformers_version")}
    return {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "model_type": "gemma4",
        "text_config": tc,
        "vision_config": None,  # the dummy tower tensors below are not a real tower
        "audio_config": None,
        "audio_token_id": 258881, "boa_token_id": 256000, "boi_token_id": 255999,
        "eoa_token_id": 258883, "eoa_token_index": 258883, "eoi_token_id": 258882,
        "image_token_id": 258880, "video_token_id": 258884,
        "eos_token_id": [1, 106], "initializer_range": 0.02, "dtype": "float32",
        "tie_word_embeddings": True, "transformers_version": "5.5.0",
    }


def random_weights(cfg, rng):
    """{short name: float32 array}. Scales keep activations O(1) so that softmaxes, the
    soft-cap and the router are all in their non-trivial range."""
    w = {}
    for name, shape in cfg.param_shapes().items():
        leaf = name.split(".")[-2] if name.endswith(".weight") else name.split(".")[-1]
        if name == "embed_tokens.weight":
            a = rng.normal(0.0, 1.5 / np.sqrt(cfg.D), shape)
        elif leaf in ("q_norm", "k_norm"):
            # q.k at attention scale 1.0 sums hd terms: ~hd^-1/4 per side keeps scores O(1)
            a = shape[0] ** -0.25 * rng.uniform(0.6, 1.6, shape)
        elif len(shape) == 1:  # norms, router.scale, per_expert_scale, layer_scalar
            a = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("router.proj.weight"):
            a = rng.normal(0.0, 1.0, shape)  # router inputs have norm ~1: logits spread ~1
        else:  # [out, in] or [E, out, in]
            a = rng.normal(0.0, 1.0 / np.sqrt(shape[-1]), shape)
        w[name] = a.astype(np.float32)
    return w


def router_margin(cfg, params, tokens):
    """Smallest (k-th - (k+1)-th) router logit gap over all tokens and layers, relative to
    max(1, max |logit|) of that token; inf when top_k == num_experts."""
    if not cfg.moe or cfg.K >= cfg.E:
        return float("inf")
    with torch.no_grad():
        out = gemma4_ref.compute(cfg, params, tokens, lb_weight=0.0)
    worst = float("inf")
    for st in out["stats"]:
        lg = st["logits"].reshape(-1, cfg.E)
        top = torch.sort(lg, dim=-1, descending=True).values
        gap = (top[:, cfg.K - 1] - top[:, cfg.K]) / lg.abs().max(-1).values.clamp(min=1.0)
        worst = min(worst, float(gap.min()))
    return worst


def make_model(out_dir, bf16=False, shards=1, **opts):
    """Writes out_dir/{config.json, model.safetensors, tokens.bin, tokens.json}.
    Returns dict(batch, seq, margin, tokens, path)."""
    o = dict(BASE)
    unknown = set(opts) - set(o)
    if unknown:
        raise ValueError("unknown options %s" % sorted(unknown))
    o.update(opts)
    os.makedirs(out_dir, exist_ok=True)
    conf = full_config(o)
    cfg = gemma4_ref.Config(conf)
    for attempt in range(40):
        # a fresh weight draw every 8 attempts, fresh tokens every attempt
        rng_w = np.random.default_rng([o["seed"], attempt // 8])
        weights = random_weights(cfg, rng_w)
        if bf16:  # store values that are exactly representable in bf16
            weights = {n: safetensors_np.bf16_to_f32(safetensors_np.f32_to_bf16_bits(a))
                       for n, a in weights.items()}
        params = {n: torch.tensor(a, dtype=torch.float64) for n, a in weights.items()}
        rng_t = np.random.default_rng([o["seed"], 1000 + attempt])
        tokens = rng_t.integers(0, o["vocab"], size=(o["batch"], o["seq"] + 1))
        margin = router_margin(cfg, params, tokens)
        if margin > MIN_MARGIN:
            break
    else:
        raise RuntimeError("no draw without router near-ties (best margin %.2e)" % margin)
    prefix = "model.language_model." if o["multimodal"] else "model."
    tensors = {prefix + n: a for n, a in weights.items()}
    if o["multimodal"]:  # stand-ins for the towers a text engine must skip
        r = np.random.default_rng(o["seed"] + 77)
        tensors["model.vision_tower.encoder.layers.0.self_attn.q_proj.weight"] = \
            r.normal(size=(8, 8)).astype(np.float32)
        tensors["model.embed_vision.embedding_projection.weight"] = \
            r.normal(size=(o["d_model"], 8)).astype(np.float32)
    write_tensors(out_dir, tensors, shards, bf16)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(conf, f, indent=2)
    tokens.astype("<i4").tofile(os.path.join(out_dir, "tokens.bin"))
    with open(os.path.join(out_dir, "tokens.json"), "w") as f:
        json.dump({"batch": o["batch"], "seq": o["seq"], "file": "tokens.bin",
                   "router_margin": margin}, f)
    return dict(batch=o["batch"], seq=o["seq"], margin=margin, tokens=tokens, path=out_dir)


def write_tensors(out_dir, tensors, shards, bf16):
    names = sorted(tensors)
    bf = set(names) if bf16 else set()
    if shards <= 1:
        safetensors_np.save_file(tensors, os.path.join(out_dir, "model.safetensors"),
                                 metadata={"format": "pt"}, bf16=bf)
        return
    weight_map = {}
    for s in range(shards):
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = {n: tensors[n] for n in names[s::shards]}
        safetensors_np.save_file(part, os.path.join(out_dir, fname), metadata={"format": "pt"},
                                 bf16=bf & set(part))
        weight_map.update({n: fname for n in part})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)


def main(argv=None):
    ap = argparse.ArgumentParser(description="random tiny Gemma-4 HF folder + tokens")
    ap.add_argument("--out", help="output folder")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="start from a preset")
    ap.add_argument("--list", action="store_true", help="print the presets and exit")
    ap.add_argument("--bf16", action="store_true", help="store tensors as BF16")
    ap.add_argument("--shards", type=int, default=1, help="write N shards + index.json")
    for k, v in BASE.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            ap.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "on", "yes"),
                            default=None, metavar="on|off")
        elif k == "global_kv_heads":
            ap.add_argument(flag, type=int, default=None)
        else:
            ap.add_argument(flag, type=type(v), default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    if a.list:
        for n, p in PRESETS.items():
            print(n, json.dumps(dict(BASE, **p)))
        return 0
    if not a.out:
        ap.error("--out is required")
    opts = dict(PRESETS[a.preset]) if a.preset else {}
    opts.update({k: getattr(a, k) for k in BASE if getattr(a, k) is not None})
    r = make_model(a.out, bf16=a.bf16, shards=a.shards, **opts)
    print(json.dumps({"path": r["path"], "batch": r["batch"], "seq": r["seq"],
                      "router_margin": r["margin"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

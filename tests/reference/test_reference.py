"""Self-tests of the reference. Plain python, exits non-zero on failure, well under a minute.

  /usr/bin/python3 tests/reference/test_reference.py

1. autograd gradients == central finite differences (float64), element samples of every
   parameter tensor plus one random direction over all parameters, with a large
   load-balance weight so its gradient is visible; on the MoE layer and the dense one;
2. sliding window: through one sliding layer the output at i ignores token i-W and sees
   token i-W+1; a global layer sees both;
3. packed segments: a document packed after another gives the same logits as alone;
4. the multimodal folder (model.language_model. prefix, nested text_config, vision tensors)
   gives exactly the text-only folder's results;
5. safetensors: dtypes round-trip, BF16 widening, sharded folder == single file;
6. config facts: proportional RoPE frequencies, K=V gating of num_global_key_value_heads;
7. the load-balance loss recomputed with plain loops.
"""
import json
import math
import os
import re
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gemma4_ref  # noqa: E402
import make_random_model  # noqa: E402
import safetensors_np  # noqa: E402

FAILS = []


def check(cond, what):
    print("  %-4s %s" % ("ok" if cond else "FAIL", what), flush=True)
    if not cond:
        FAILS.append(what)


TINY = dict(seed=11, layers=3, pattern="SGS", d_model=10, heads=2, kv_heads=1,
            global_kv_heads=1, head_dim=4, global_head_dim=8, mlp_dim=6, experts=5, top_k=2,
            expert_dim=3, vocab=13, window=3, seq=7, batch=2, k_eq_v=True)


def load(d, dtype=torch.float64, layer_types=None):
    cfg, params, prefix, _ = gemma4_ref.load_model(d, dtype, layer_types)
    return cfg, params, prefix


def test_finite_differences(td):
    print("finite differences (float64)")
    cases = (("K=V", TINY),
             ("separate V, top-1", dict(TINY, seed=12, k_eq_v=False, top_k=1, pattern="GS")),
             ("dense (no MoE block)", dict(TINY, seed=13, experts=1)),
             # layers 2-3 read the K/V of layers 0 (S) and 1 (G) and have double-wide MLPs
             ("small block (per-layer inputs, shared K/V)",
              dict(TINY, seed=16, experts=1, layers=4, pattern="SG", k_eq_v=False,
                   per_layer_dim=4, kv_shared=2, double_wide=True)))
    for case, (name, opts) in enumerate(cases):
        d = os.path.join(td, "fd%d" % case)
        meta = make_random_model.make_model(d, **opts)
        cfg, params, _ = load(d)
        lbw = 0.3  # large, so the load-balance gradient is a visible part of every check

        def loss():
            with torch.no_grad():
                return gemma4_ref.compute(cfg, params, meta["tokens"], lbw)["total_loss"].item()
        out = gemma4_ref.compute(cfg, params, meta["tokens"], lbw)
        out["total_loss"].backward()
        grads = {n: p.grad.clone() for n, p in params.items()}
        rng = np.random.default_rng(0)
        # Richardson-extrapolated central differences: O(h^4) truncation, and h small enough
        # (2h = 2e-4) that no router top-k choice flips (the maker keeps margins > 1e-3).
        h, worst, worst_name = 1e-4, 0.0, None
        gall = max(float(g.abs().max()) for g in grads.values())

        def central(set_value, old):
            d = []
            for step in (h, 2 * h):
                set_value(old + step)
                up = loss()
                set_value(old - step)
                dn = loss()
                d.append((up - dn) / (2 * step))
            set_value(old)
            return (4 * d[0] - d[1]) / 3
        for n, p in params.items():
            flat = p.data.view(-1)
            picks = range(flat.numel()) if flat.numel() <= 2 else rng.choice(flat.numel(), 3, False)
            for i in picks:
                i = int(i)
                fd = central(lambda x: flat.__setitem__(i, x), float(flat[i]))
                ad = float(grads[n].view(-1)[i])
                # relative error, floored at 1e-4 of the largest gradient entry: below that,
                # fp64 rounding of the loss (~1e-16 * |loss| / h) dominates the difference
                err = abs(fd - ad) / max(abs(ad), 1e-4 * gall)
                if err > worst:
                    worst, worst_name = err, "%s[%d] ad %.6e fd %.6e" % (n, i, ad, fd)
        check(worst < 1e-6, "%s: element samples of all %d tensors, worst rel err %.1e (%s)"
              % (name, len(params), worst, worst_name))
        # one random unit direction through every parameter at once
        gen = torch.Generator().manual_seed(3)
        v = {n: torch.randn(p.shape, dtype=p.dtype, generator=gen) for n, p in params.items()}
        vn = math.sqrt(sum(float((x ** 2).sum()) for x in v.values()))
        v = {n: x / vn for n, x in v.items()}
        base = {n: p.data.clone() for n, p in params.items()}

        def move(t):
            for n, p in params.items():
                p.data.copy_(base[n] + t * v[n])
        fd = central(move, 0.0)
        ad = sum(float((grads[n] * v[n]).sum()) for n in params)
        check(abs(fd - ad) / abs(ad) < 1e-8, "%s: random unit direction, <g,v> %.12e vs fd "
              "%.12e (rel err %.1e)" % (name, ad, fd, abs(fd - ad) / abs(ad)))
        kinds = {re.sub(r"^layers\.\d+\.", "", n) for n in params}
        need = {"router.scale", "router.per_expert_scale", "layer_scalar", "router.proj.weight",
                "self_attn.q_norm.weight", "embed_tokens.weight", "experts.gate_up_proj"}
        if not cfg.moe:  # the dense layer: the MLP alone between its two norms
            need = {"layer_scalar", "self_attn.q_norm.weight", "embed_tokens.weight",
                    "mlp.down_proj.weight", "post_feedforward_layernorm.weight"}
            check(not any("router" in n or "_1.weight" in n for n in kinds),
                  "%s: no router, experts or post_feedforward_layernorm_1" % name)
        if cfg.P:  # the small block: per-layer inputs; no k/v weights in the sharing layers
            need |= {"embed_tokens_per_layer.weight", "per_layer_model_projection.weight",
                     "per_layer_projection_norm.weight", "per_layer_input_gate.weight",
                     "per_layer_projection.weight", "post_per_layer_input_norm.weight"}
            shared = [n for n in params if re.match(r"layers\.[23]\.self_attn\.(k|v)_", n)]
            check(not shared and params["layers.3.mlp.up_proj.weight"].shape[0] == 2 * cfg.Fs,
                  "%s: sharing layers have no k/v weights and a double-wide MLP" % name)
        check(need <= kinds, "%s: the %d kinds checked include %s" % (name, len(kinds),
                                                                   ", ".join(sorted(need))))


def test_sliding_window(td):
    print("sliding window (one layer)")
    W, S = 4, 12
    for pat, expect_local in (("S", True), ("G", False)):
        d = os.path.join(td, "win_" + pat)
        make_random_model.make_model(d, **dict(TINY, seed=21, layers=1, pattern=pat, window=W,
                                               seq=S, batch=1))
        cfg, params, _ = load(d)
        rng = np.random.default_rng(5)
        base = rng.integers(0, cfg.V, size=(1, S + 1))
        with torch.no_grad():
            ref = gemma4_ref.compute(cfg, params, base, 0.0)["logits"]
            far, near = [], []
            for i in range(W, S):
                for j, bucket in ((i - W, far), (i - W + 1, near)):
                    t = base.copy()
                    t[0, j] = (t[0, j] + 1) % cfg.V
                    out = gemma4_ref.compute(cfg, params, t, 0.0)["logits"]
                    bucket.append(float((out[0, i] - ref[0, i]).abs().max()))
        if expect_local:
            check(max(far) == 0.0, "sliding: token i-W leaves output i unchanged (max %.1e)"
                  % max(far))
            check(min(near) > 1e-6, "sliding: token i-W+1 changes output i (min %.1e)" % min(near))
        else:
            check(min(far) > 1e-6, "global: token i-W changes output i (min %.1e)" % min(far))


def test_segments(td):
    print("packed segments")
    d = os.path.join(td, "seg")
    make_random_model.make_model(d, **dict(TINY, seed=31, seq=13, batch=1))
    cfg, params, _ = load(d)
    rng = np.random.default_rng(7)
    a, b = rng.integers(0, cfg.V, 6), rng.integers(0, cfg.V, 8)
    packed = np.concatenate([a, b])[None]
    seg = np.array([[1] * len(a) + [2] * len(b)])
    with torch.no_grad():
        p = gemma4_ref.compute(cfg, params, packed, 0.001, segment_ids=seg)
        alone_b = gemma4_ref.compute(cfg, params, b[None], 0.001)
        alone_a = gemma4_ref.compute(cfg, params, a[None], 0.001)
    la = len(a)
    e_b = float((p["logits"][0, la:] - alone_b["logits"][0]).abs().max())
    e_a = float((p["logits"][0, :la - 1] - alone_a["logits"][0]).abs().max())
    check(e_b < 1e-12, "second document packed == alone (max diff %.1e)" % e_b)
    check(e_a < 1e-12, "first document packed == alone (max diff %.1e)" % e_a)
    pos = gemma4_ref.positions_from_segments(seg)
    check(list(pos[0]) == list(range(6)) + list(range(8)), "positions restart per segment")
    # the cross-document target (a's last token -> b's first) counts: mask = target seg != 0
    logp = torch.log_softmax(p["logits"][0], -1)
    tg = torch.as_tensor(packed[0, 1:])
    want = float(-logp.gather(-1, tg[:, None]).sum() / (len(tg) + 1e-8))
    check(abs(want - p["ce_loss"].item()) < 1e-12, "every target with segment != 0 counts")
    seg0 = seg.copy()
    seg0[0, -3:] = 0  # padding at the end: those targets drop out of the mean
    with torch.no_grad():
        p0 = gemma4_ref.compute(cfg, params, packed, 0.0, segment_ids=seg0)
    xent = -torch.log_softmax(p0["logits"][0], -1).gather(-1, tg[:, None])[:, 0]
    want0 = float(xent[:-3].sum() / (len(xent) - 3 + 1e-8))
    check(abs(want0 - p0["ce_loss"].item()) < 1e-12, "padding targets (segment 0) are masked")


def test_multimodal_prefix(td):
    print("multimodal folder == text-only folder")
    da, db = os.path.join(td, "mm_text"), os.path.join(td, "mm_multi")
    ma = make_random_model.make_model(da, **dict(TINY, seed=41))
    make_random_model.make_model(db, **dict(TINY, seed=41, multimodal=True))
    ra = gemma4_ref.run(da, ma["tokens"])
    rb = gemma4_ref.run(db, ma["tokens"])
    check(rb["prefix"] == "model.language_model." and len(rb["skipped"]) == 2,
          "prefix model.language_model., %d vision tensors skipped" % len(rb["skipped"]))
    same = all(torch.equal(ra["grads"]["model." + n[len("model.language_model."):]], g)
               for n, g in rb["grads"].items()) and len(ra["grads"]) == len(rb["grads"])
    check(same and ra["total_loss"] == rb["total_loss"] and torch.equal(ra["logits"], rb["logits"]),
          "identical losses, logits and gradients")


def test_safetensors(td):
    print("safetensors")
    rng = np.random.default_rng(1)
    t = {"f64": rng.normal(size=(3, 2)), "f32": rng.normal(size=(5,)).astype(np.float32),
         "f16": rng.normal(size=(2, 2)).astype(np.float16),
         "i32": rng.integers(-9, 9, (4,)).astype(np.int32),
         "i64": rng.integers(-9, 9, (2, 3)).astype(np.int64), "scalar": np.float32(2.5)}
    path = os.path.join(td, "t.safetensors")
    safetensors_np.save_file(t, path, metadata={"format": "pt"})
    back = safetensors_np.load_file(path)
    check(all(back[k].dtype == np.asarray(v).dtype and np.array_equal(back[k], v)
              for k, v in t.items()), "F64/F32/F16/I32/I64/0-d round-trip")
    header, base = safetensors_np.read_header(path)
    check(base % 8 == 0 and header["__metadata__"] == {"format": "pt"}, "header padded, metadata")
    x = rng.normal(size=(7, 3)).astype(np.float32)
    safetensors_np.save_file({"x": x}, path, bf16={"x"})
    xb = safetensors_np.load_file(path)["x"]
    u = x.view(np.uint32).astype(np.uint64)
    want = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    check(xb.dtype == np.float32 and np.array_equal(xb, want) and
          float(np.abs(xb - x).max() / np.abs(x).max()) < 2 ** -8, "BF16 read as float32")
    d1, d3 = os.path.join(td, "one"), os.path.join(td, "three")
    m1 = make_random_model.make_model(d1, bf16=True, **dict(TINY, seed=51))
    make_random_model.make_model(d3, bf16=True, shards=3, **dict(TINY, seed=51))
    f1, f3 = safetensors_np.load_folder(d1), safetensors_np.load_folder(d3)
    check(set(f1) == set(f3) and all(np.array_equal(f1[n], f3[n]) for n in f1)
          and os.path.exists(os.path.join(d3, "model.safetensors.index.json")),
          "3 BF16 shards via index.json == one BF16 file")
    r = gemma4_ref.run(d3, m1["tokens"])
    check(math.isfinite(r["total_loss"]), "reference runs on the sharded BF16 folder")


def test_config_facts(td):
    print("config facts")
    d = os.path.join(td, "cfg")
    make_random_model.make_model(d, **dict(TINY, seed=61, global_head_dim=10, pattern="SG",
                                           layers=2))
    raw = gemma4_ref.read_config_json(d)
    cfg = gemma4_ref.Config(raw)
    inv = cfg.inv_freq(1, torch.float64)  # global: hd 10, factor 0.25 -> int(2.5 // 2) = 1 pair
    check(inv.shape == (5,) and inv[0] == 1.0 and bool((inv[1:] == 0).all()),
          "proportional RoPE, hd 10 x 0.25: 1 rotated pair, 4 zero frequencies")
    loc = cfg.inv_freq(0, torch.float64)
    check(abs(float(loc[1]) - 10000.0 ** (-2 / 4)) < 1e-15, "default RoPE theta^(-2i/hd)")
    raw2 = json.loads(json.dumps(raw))
    raw2["attention_k_eq_v"] = False
    raw2["num_global_key_value_heads"] = 7
    c2 = gemma4_ref.Config(raw2)
    check(c2.layer_dims(1) == (cfg.kv_local, 10, True),
          "without K=V, global layers keep num_key_value_heads (HF gating)")
    nested = {"model_type": "gemma4", "text_config": raw}
    check(gemma4_ref.Config(nested).param_shapes() == cfg.param_shapes(), "nested text_config")


def test_lb_loss_loops(td):
    print("load-balance loss by plain loops")
    d = os.path.join(td, "lb")
    meta = make_random_model.make_model(d, **dict(TINY, seed=71))
    cfg, params, _ = load(d)
    with torch.no_grad():
        out = gemma4_ref.compute(cfg, params, meta["tokens"], 0.001)
    B, S = meta["batch"], meta["seq"]
    total = 0.0
    for st in out["stats"]:
        p, idx = st["probs"].numpy(), st["idx"].numpy()
        acc = 0.0
        for b in range(B):
            for e in range(cfg.E):
                dens = sum(e in idx[b, s] for s in range(S)) / S
                pbar = sum(p[b, s, e] for s in range(S)) / S
                acc += dens * pbar
        total += 0.001 * cfg.E ** 2 * acc / (B * cfg.E)
    want = total / cfg.L
    check(abs(want - out["lb_loss"].item()) < 1e-14 * max(1.0, want),
          "lb %.12f == loops %.12f" % (out["lb_loss"].item(), want))
    rs = [st["probs"].sum(-1) for st in out["stats"]]
    check(all(bool(((r - 1).abs() < 1e-12).all()) for r in rs), "router softmax over all experts")


def main():
    t0 = time.time()
    torch.set_num_threads(1)  # tiny tensors: threading overhead dominates (badly on torch 2.x)
    print("torch %s, numpy %s" % (torch.__version__, np.__version__))
    with tempfile.TemporaryDirectory() as td:
        for t in (test_finite_differences, test_sliding_window, test_segments,
                  test_multimodal_prefix, test_safetensors, test_config_facts, test_lb_loss_loops):
            t(td)
    n = sum(1 for _ in FAILS)
    print("%s in %.1f s" % ("all passed" if not n else "%d FAILED" % n, time.time() - t0))
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main())

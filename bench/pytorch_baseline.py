"""The PyTorch baseline gemmax is timed against: the Gemma-4 MoE training step written for
speed the way a competent PyTorch user would write it.

- bf16 autocast over fp32 master weights, or plain fp32 (--dtype; `auto` times both on the
  first steps and keeps the faster: on CPUs whose bf16 dot product runs at half the FMA rate,
  as on Intel Xeons without AMX, a competent user picks fp32), AdamW (fused where torch has
  it) with global-norm clipping, the same losses (soft-capped cross-entropy + load-balance);
- the MoE sorts the token copies by expert and runs one gate_up / down matmul pair per expert
  (fused gate_up weight, as in the checkpoint layout);
- attention by SDPA or by explicit matmuls with the causal / sliding mask (--attention picks;
  `auto` times both on the first steps and keeps the faster);
- full remat: every decoder layer under torch.utils.checkpoint (non-reentrant);
- optionally torch.compile (--compile) of the attention block and the dense MLP (compiling the
  whole layer fails under checkpointing: the MoE's expert sizes are data-dependent).

Synthetic data (random tokens), the same batch, sequence and thread count as the gemmax run
it is compared with. Prints step time and tokens/s; --json writes them.

Runs with any recent torch (a PyPI torch in a virtual environment outside the repository):
  python bench/pytorch_baseline.py --threads 2 --batch 4 --seq 1024 [--model gemma4-small]
  python bench/pytorch_baseline.py --device cuda --model gemma4-26b-a4b --layers 6 --batch 2 \
      --seq 16384
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

# The presets of configs/models/ (the fields this model needs).
PRESETS = {
    "gemma4-tiny": dict(L=6, D=128, H=4, KV=2, hd=32, KVg=1, hdg=64, Fs=256, F=64, E=8, K=2,
                        V=259, W=64),
    "gemma4-small": dict(L=6, D=512, H=8, KV=4, hd=64, KVg=1, hdg=128, Fs=384, F=128, E=64, K=8,
                         V=32768, W=256),
    "gemma4-26b-a4b": dict(L=30, D=2816, H=16, KV=8, hd=256, KVg=2, hdg=512, Fs=2112, F=704,
                           E=128, K=8, V=262144, W=1024),
}


def rms_norm(x, w, eps=1e-6):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * w.float()
    return y.to(x.dtype)


def rope_tables(pos, hd, theta, proportion, device):
    rot = int(proportion * hd) // 2
    inv = theta ** (-2.0 * torch.arange(hd // 2, dtype=torch.float64, device=device) / hd)
    inv[rot:] = 0.0
    ang = pos.double()[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):  # x [B, S, heads, hd]; split halves
    half = x.shape[-1] // 2
    a, b = x[..., :half].float(), x[..., half:].float()
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([a * c - b * s, b * c + a * s], -1).to(x.dtype)


class Layer(torch.nn.Module):
    def __init__(self, c, is_global, init):
        super().__init__()
        self.c, self.g = c, is_global
        D, H = c["D"], c["H"]
        self.kv = c["KVg"] if is_global else c["KV"]
        self.hd = c["hdg"] if is_global else c["hd"]
        p = lambda *s: torch.nn.Parameter(init(*s))  # noqa: E731
        ones = lambda n: torch.nn.Parameter(torch.ones(n))  # noqa: E731
        self.q = p(H * self.hd, D)
        self.k = p(self.kv * self.hd, D)
        self.v = None if is_global else p(self.kv * self.hd, D)
        self.o = p(D, H * self.hd)
        self.q_norm, self.k_norm = ones(self.hd), ones(self.hd)
        self.norms = torch.nn.ParameterList([ones(D) for _ in range(7)])
        self.mlp_gate_up, self.mlp_down = p(2 * c["Fs"], D), p(D, c["Fs"])
        self.router, self.router_scale, self.pes = p(c["E"], D), ones(D), ones(c["E"])
        self.gate_up, self.down = p(c["E"], 2 * c["F"], D), p(c["E"], D, c["F"])
        self.scalar = ones(1)

    def attention(self, x, seg, cos, sin, kind):
        c, B, S = self.c, x.shape[0], x.shape[1]
        H, kv, hd = c["H"], self.kv, self.hd
        a = rms_norm(x, self.norms[0])
        q = (a @ self.q.T).view(B, S, H, hd)
        kr = (a @ self.k.T).view(B, S, kv, hd)
        vr = kr if self.v is None else (a @ self.v.T).view(B, S, kv, hd)
        q = apply_rope(rms_norm(q, self.q_norm), cos, sin)
        k = apply_rope(rms_norm(kr, self.k_norm), cos, sin)
        v = rms_norm(vr, None)
        i = torch.arange(S, device=x.device)
        allowed = i[None, :] <= i[:, None]
        if not self.g:
            allowed = allowed & (i[None, :] > i[:, None] - c["W"])
        mask = allowed[None] & (seg[:, :, None] == seg[:, None, :])  # [B, S, S]
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        rep = H // kv
        if kind == "sdpa":
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], scale=1.0)
        else:
            qg = q.reshape(B, kv, rep, S, hd)  # query heads of one kv head together
            s = torch.einsum("bgrsd,bgtd->bgrst", qg, k).float()
            s = s.masked_fill(~mask[:, None, None], float("-inf"))
            p_ = torch.softmax(s, -1).to(v.dtype)
            o = torch.einsum("bgrst,bgtd->bgrsd", p_, v).reshape(B, H, S, hd)
        o = o.transpose(1, 2).reshape(B, S, H * hd) @ self.o.T
        return x + rms_norm(o, self.norms[1])

    def moe(self, h):
        c = self.c
        B, S, D = h.shape
        E, K = c["E"], c["K"]
        x = h.reshape(B * S, D)
        z = rms_norm(x, None) * (self.router_scale.float() * D ** -0.5).to(x.dtype)
        logits = z @ self.router.T
        probs = torch.softmax(logits.float(), -1)
        w, idx = torch.topk(probs, K, -1)
        w = w / w.sum(-1, keepdim=True) * self.pes.float()[idx]
        e = rms_norm(x, self.norms[4])
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        sizes = torch.bincount(flat, minlength=E).tolist()
        xs = e[order // K]
        # Each expert's weights once: unbind's backward stacks the per-expert gradients (a
        # select per expert would fill a full-size zero gradient for every expert).
        gate_up, down = self.gate_up.to(xs.dtype).unbind(0), self.down.to(xs.dtype).unbind(0)
        outs = []
        for g, rows in enumerate(xs.split(sizes)):  # one matmul pair per expert (split's
            if rows.shape[0]:                        # backward is one cat, not a zero-fill)
                gate, up = (rows @ gate_up[g].T).chunk(2, -1)
                outs.append((F.gelu(gate, approximate="tanh") * up) @ down[g].T)
        ys = torch.cat(outs)
        y = torch.empty_like(ys)
        y[order] = ys  # back to token-copy order
        m = (y.view(B * S, K, D).float() * w[..., None]).sum(1).to(x.dtype)
        # load balance (per sequence), this layer's share of the mean over layers
        hits = F.one_hot(idx, E).sum(1).float().view(B, S, E).mean(1)
        lb = 0.001 * E * E * (hits * probs.view(B, S, E).mean(1)).mean()
        return rms_norm(m, self.norms[5]).view(B, S, D), lb

    def dense_mlp(self, h):
        gate, up = (rms_norm(h, self.norms[2]) @ self.mlp_gate_up.T).chunk(2, -1)
        d = F.gelu(gate, approximate="tanh") * up
        return rms_norm(d @ self.mlp_down.T, self.norms[3])

    def forward(self, x, seg, cos, sin, kind):
        h = self.attention(x, seg, cos, sin, kind)
        d = self.dense_mlp(h)
        m, lb = self.moe(h)
        f = rms_norm(d + m, self.norms[6])
        return (h + f) * self.scalar.to(h.dtype), lb


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        init = lambda *s: torch.randn(*s) * 0.02  # noqa: E731
        self.embed = torch.nn.Parameter(init(c["V"], c["D"]))
        self.final_norm = torch.nn.Parameter(torch.ones(c["D"]))
        self.layers = torch.nn.ModuleList(
            [Layer(c, l % 6 == 5, init) for l in range(c["L"])])

    def forward(self, tokens, targets, pos, seg, kind, remat, act):
        c = self.c
        x = (self.embed[tokens] * math.sqrt(c["D"])).to(act)
        tabs = {g: rope_tables(pos[0], c["hdg"] if g else c["hd"], 1e6 if g else 1e4,
                               0.25 if g else 1.0, tokens.device) for g in (False, True)}
        lb_sum = 0.0
        for layer in self.layers:
            cos, sin = tabs[layer.g]
            if remat:
                x, lb = checkpoint(layer, x, seg, cos, sin, kind, use_reentrant=False)
            else:
                x, lb = layer(x, seg, cos, sin, kind)
            lb_sum = lb_sum + lb
        y = rms_norm(x, self.final_norm)
        logits = (y @ self.embed.T.to(y.dtype))
        logits = (30.0 * torch.tanh(logits / 30.0)).float()
        ce = F.cross_entropy(logits.view(-1, c["V"]), targets.view(-1))
        return ce + lb_sum / c["L"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gemma4-small", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, default=0, help="decoder layers (0: the preset's)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--attention", default="auto", choices=["auto", "sdpa", "matmul"])
    ap.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"],
                    help="bf16 autocast or fp32 (auto: the faster)")
    ap.add_argument("--compile", action="store_true", help="torch.compile each layer")
    ap.add_argument("--no-remat", action="store_true")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = dict(PRESETS[a.model])
    if a.layers:
        c["L"] = a.layers
    dev = torch.device(a.device)
    model = Model(c).to(dev)
    if a.compile and not hasattr(torch, "compile"):
        raise SystemExit("pytorch_baseline.py: --compile needs torch 2.0 or later (this is torch %s)"
                         % torch.__version__)
    if a.compile:  # the static-shape parts; the MoE's per-expert sizes change every step
        for layer in model.layers:
            layer.attention = torch.compile(layer.attention)
            layer.dense_mlp = torch.compile(layer.dense_mlp)
    fused = {"fused": True} if a.device == "cuda" else {"foreach": True}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, **fused)
    B, S = a.batch, a.seq
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, c["V"], (B, S), generator=g).to(dev)
    targets = torch.randint(0, c["V"], (B, S), generator=g).to(dev)
    pos = torch.arange(S, device=dev)[None].expand(B, S)
    seg = torch.ones(B, S, dtype=torch.int32, device=dev)

    def step(choice):
        kind, dtype = choice
        opt.zero_grad(set_to_none=True)
        act = torch.bfloat16 if dtype == "bf16" else torch.float32
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = model(tokens, targets, pos, seg, kind, not a.no_remat, act)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        return loss.item()

    def timed(choice):
        t = time.perf_counter()
        step(choice)
        return time.perf_counter() - t

    # The fastest of the attention kinds and dtypes asked for, after a warm-up step each.
    kinds = (a.attention,)
    if a.attention == "auto":  # torch before 2.0 has no SDPA
        kinds = ("sdpa", "matmul") if hasattr(F, "scaled_dot_product_attention") else ("matmul",)
    dtypes = ("bf16", "fp32") if a.dtype == "auto" else (a.dtype,)
    choices = [(k, d) for d in dtypes for k in kinds]
    choice = choices[0]
    if len(choices) > 1:
        trial = {}
        for ch in choices:
            step(ch)
            trial[ch] = timed(ch)
        choice = min(trial, key=trial.get)
        print("chose attention %s, %s (%s)" % (choice[0], choice[1], ", ".join(
            "%s %s %.3f s" % (k, d, t) for (k, d), t in trial.items())), flush=True)
    kind, dtype = choice
    for _ in range(a.warmup):
        step(choice)
    times = [timed(choice) for _ in range(a.steps)]
    times.sort()
    med = times[len(times) // 2]
    tok = B * S / med
    print("pytorch %s | %s | %s threads | batch %d x %d | %s | attention %s%s%s" % (
        torch.__version__, a.model + ("/%dL" % c["L"] if a.layers else ""), torch.get_num_threads(),
        B, S, "bf16 autocast" if dtype == "bf16" else "fp32", kind,
        " | compiled" if a.compile else "", " | no remat" if a.no_remat else ""))
    print("step time  %.3f s (median of %d; min %.3f)" % (med, len(times), times[0]))
    print("tokens/s   %.1f" % tok)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "model": a.model, "layers": c["L"],
                       "batch": B, "seq": S, "threads": torch.get_num_threads(),
                       "device": a.device, "attention": kind, "dtype": dtype,
                       "compiled": a.compile,
                       "step_seconds": times, "step_seconds_median": med,
                       "tokens_per_sec": tok}, f, indent=2)


if __name__ == "__main__":
    main()

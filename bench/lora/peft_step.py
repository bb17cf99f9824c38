"""The PyTorch + PEFT peer of gemmax's LoRA training-step benchmark: tokens/s of one LoRA step of
a gemma4-e2b-shaped model in Hugging Face transformers, as a competent user would run it.

The model is transformers' own Gemma4ForCausalLM with gemma4-e2b's config.json values at their
true widths (hidden 1536, 8 query heads and 1 KV head of 256, global layers' heads of 512, MLP
6144, sliding window 512, 4 sliding + 1 global layer repeated, the small block's per-layer
inputs of 256, soft-cap 30, tied embedding, vocab 262144), but --layers decoder layers (the
layer pattern kept, the last layer global as transformers requires; the last layers share the
K/V of earlier ones, with double-wide MLPs, only where enough layers precede them: e2b shares
20 of 35), random weights (transformers' init, seeded). PEFT LoRA r 16, alpha 32 on q/k/v/o and
gate/up/down; AdamW (lr 1e-4, PyTorch's defaults otherwise) on the adapter only; transformers'
own causal-LM loss on random tokens, batch --batch x --seq, SDPA attention.

Four modes, each from the same initial adapter: fp32 eager, bf16 autocast eager, fp32
torch.compile, bf16 autocast torch.compile (a compile that fails is reported and skipped).
Each prints one JSON line; then a full fine-tune step (every parameter trained, no LoRA) in the
best mode's dtype and compile setting, unless --no-full or memory is short; the last line names
the best LoRA mode. tokens/s = batch x seq / the median step time after --warmup steps.

  VENV=${TMPDIR:-/tmp}/gemmax-hf-venv   # torch, transformers >= 5.5, peft
  $VENV/bin/python bench/lora/peft_step.py [--layers 4] [--seq 2048] [--batch 1] \
      [--threads N] [--vocab 262144] [--steps 5] [--warmup 2] [--modes fp32_eager,...] \
      [--no-full] [--json FILE]
  # a quick try:
  $VENV/bin/python bench/lora/peft_step.py --layers 2 --seq 128 --vocab 4096 --steps 2

Memory at the defaults: 0.82 G parameters (3.3 GB fp32; the two 262144-row tables are 0.67 G of
them), fp32 logits of 2 GB per 2048 tokens; the full fine-tune needs about three times the
weights more (gradients and Adam's moments). Layers and shared layers: 4 -> SSSG, none shared;
10 -> SSSSGSSSSG, the last 5 shared; 35 -> e2b itself (20 shared, 4.63 G parameters).
"""
import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time

import torch

# gemma4-e2b's config.json (configs/models/gemma4-e2b.yml as gemmax exports it)
E2B = dict(hidden_size=1536, num_attention_heads=8, num_key_value_heads=1, head_dim=256,
           global_head_dim=512, num_global_key_value_heads=1, attention_k_eq_v=False,
           intermediate_size=6144, sliding_window=512, final_logit_softcapping=30.0,
           rms_norm_eps=1e-6, hidden_size_per_layer_input=256, use_double_wide_mlp=True,
           hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
           enable_moe_block=False, num_experts=None, top_k_experts=None,
           moe_intermediate_size=None, attention_bias=False, attention_dropout=0.0,
           max_position_embeddings=262144, pad_token_id=0, eos_token_id=1, bos_token_id=2,
           initializer_range=0.02,
           rope_parameters={
               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
               "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                  "rope_theta": 1000000.0}})
E2B_LAYERS, E2B_SHARED, E2B_PATTERN = 35, 20, "SSSSG"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MODES = ["fp32_eager", "bf16_eager", "fp32_compile", "bf16_compile"]


def layer_types(n):
    t = ["full_attention" if E2B_PATTERN[i % len(E2B_PATTERN)] == "G" else "sliding_attention"
         for i in range(n)]
    t[-1] = "full_attention"  # transformers makes the last layer global whatever the config says
    return t


def kv_shared_count(types):
    """e2b's share (20 of 35) scaled to the layer count, reduced until every shared layer has an
    earlier unshared layer of its type to read K/V from."""
    n = len(types)
    s = round(n * E2B_SHARED / E2B_LAYERS)
    while s > 0 and not set(types[n - s:]) <= set(types[:n - s]):
        s -= 1
    return s


def make_config(layers, vocab, kv_shared):
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    types = layer_types(layers)
    shared = kv_shared_count(types) if kv_shared < 0 else kv_shared
    cfg = Gemma4TextConfig(vocab_size=vocab, vocab_size_per_layer_input=vocab,
                           num_hidden_layers=layers, layer_types=types,
                           num_kv_shared_layers=shared, **E2B)
    return cfg


def mem_available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # kB on Linux


def time_steps(model, params, batches, dtype, steps, warmup, lr):
    """Runs warmup + steps AdamW steps; returns (step times after warm-up, losses)."""
    opt = torch.optim.AdamW(params, lr=lr)
    times, losses = [], []
    for i in range(warmup + steps):
        ids = batches[i % len(batches)]
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        losses.append(float(loss.detach()))
        if i >= warmup:
            times.append(dt)
    del opt
    return times, losses


def run_mode(name, model, params, batches, a, extra):
    dtype, how = name.split("_")
    rec = dict(mode=name, dtype=dtype, compiled=how == "compile", **extra)
    t0 = time.perf_counter()
    try:
        m = model
        if how == "compile":
            import torch._dynamo
            torch._dynamo.reset()
            m = torch.compile(model)
        times, losses = time_steps(m, params, batches, dtype, a.steps, a.warmup, a.lr)
        med = statistics.median(times)
        rec.update(tokens_per_sec=a.batch * a.seq / med, step_s_median=med,
                   step_s_min=min(times), steps_timed=len(times), warmup=a.warmup,
                   loss_first=losses[0], loss_last=losses[-1])
    except Exception as e:  # a compile failure (or an OOM) is a result, not the end of the run
        rec.update(error="%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:300]
                                     if str(e).strip() else ""))
    rec.update(wall_s=time.perf_counter() - t0, peak_rss_gb=peak_rss_gb())
    return rec


def emit(rec, sink):
    line = json.dumps(rec, sort_keys=False)
    print(line, flush=True)
    sink.append(rec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="0: every core (os.cpu_count())")
    ap.add_argument("--vocab", type=int, default=262144,
                    help="vocabulary (also the per-layer inputs' table)")
    ap.add_argument("--kv-shared", type=int, default=-1,
                    help="layers reading earlier layers' K/V; -1: e2b's share where possible")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per mode")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (compile in them)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma list of " + ",".join(MODES))
    ap.add_argument("--no-full", action="store_true", help="skip the full fine-tune comparison")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="", help="also write every result to this file")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error("unknown mode(s) %s" % bad)

    threads = a.threads or os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(a.seed)
    import transformers
    import peft
    from peft import LoraConfig, get_peft_model
    from transformers import Gemma4ForCausalLM

    cfg = make_config(a.layers, a.vocab, a.kv_shared)
    cfg._attn_implementation = "sdpa"
    t0 = time.perf_counter()
    model = Gemma4ForCausalLM(cfg).float()
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(a.seed + 1)
    batches = [torch.randint(0, a.vocab, (a.batch, a.seq), generator=g) for _ in range(2)]

    lcfg = LoraConfig(r=a.rank, lora_alpha=a.alpha, target_modules=LORA_TARGETS,
                      lora_dropout=0.0, task_type="CAUSAL_LM")
    pm = get_peft_model(model, lcfg)
    pm.train()
    lora = [p for p in pm.parameters() if p.requires_grad]
    init = [p.detach().clone() for p in lora]
    n_lora = sum(p.numel() for p in lora)
    common = dict(torch=torch.__version__, transformers=transformers.__version__,
                  peft=peft.__version__, threads=threads, layers=a.layers,
                  kv_shared_layers=cfg.num_kv_shared_layers, layer_types="".join(
                      "G" if t == "full_attention" else "S" for t in cfg.layer_types),
                  vocab=a.vocab, batch=a.batch, seq=a.seq, params=n_params,
                  cpu=platform.processor() or platform.machine())
    print("# peft_step: %s; model %.3f G parameters built in %.1f s; LoRA r %d alpha %g: %d "
          "trainable" % (json.dumps(common), n_params / 1e9, build_s, a.rank, a.alpha, n_lora),
          file=sys.stderr, flush=True)

    results = []
    for name in modes:
        with torch.no_grad():  # every mode starts from the same adapter
            for p, p0 in zip(lora, init):
                p.copy_(p0)
        emit(run_mode(name, pm, lora, batches, a,
                      dict(kind="lora", rank=a.rank, alpha=a.alpha, trainable=n_lora, **common)),
             results)
    ok = [r for r in results if "tokens_per_sec" in r]
    best = max(ok, key=lambda r: r["tokens_per_sec"]) if ok else None

    if not a.no_full and best is not None:
        base = pm.unload()  # the plain model, LoRA layers removed
        for p in base.parameters():
            p.requires_grad_(True)
        need = n_params * 4 * 4 + 2 * a.batch * a.seq * a.vocab * 4  # p, g, m, v + logits
        avail = mem_available_bytes()
        if avail is not None and need > 0.8 * avail:
            emit(dict(mode=best["mode"], kind="full", skipped="needs ~%.1f GB, %.1f GB available"
                      % (need / 1e9, avail / 1e9), **common), results)
        else:
            emit(run_mode(best["mode"], base, list(base.parameters()), batches, a,
                          dict(kind="full", trainable=n_params, **common)), results)
    final = {"best": best["mode"] if best else None,
             "tokens_per_sec": best["tokens_per_sec"] if best else None}
    full = [r for r in results if r.get("kind") == "full" and "tokens_per_sec" in r]
    if full and best:
        final["full_tokens_per_sec"] = full[0]["tokens_per_sec"]
        final["lora_over_full"] = best["tokens_per_sec"] / full[0]["tokens_per_sec"]
    print(json.dumps(final), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results + [final], f, indent=1)
    return 0 if best else 1


if __name__ == "__main__":
    sys.exit(main())

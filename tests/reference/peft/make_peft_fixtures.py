"""Writes the LoRA fixtures of tests/reference/peft/fixtures/ with Hugging Face PEFT itself.

For three tiny random Gemma-4 models (make_random_model.py's presets `base`: MoE with a K=V
global layer, `dense`: no MoE block, `small_e2b`: per-layer inputs and KV-shared layers) it
writes the base HF folder, a LoRA adapter saved by PEFT's own save_pretrained (r 4, alpha 8, every
linear layer of the decoder, the MoE experts through `target_parameters`), with random non-zero
lora_A AND lora_B, and the fp32 logits of the base model, of the PeftModel and of the merged
model (merge_and_unload) on the preset's tokens. Besides: an rsLoRA variant, the merged model's
weights of one preset as an HF folder, PEFT's gradients of the cross-entropy w.r.t. every
lora_A/lora_B of the MoE preset, and a rank-8 adapter of another preset (bad input).
See README.md beside this script for the layout and what each file holds.

  VENV=${TMPDIR:-/tmp}/gemmax-hf-venv
  $VENV/bin/python tests/reference/peft/make_peft_fixtures.py [--out DIR] [--check]

VENV needs torch, transformers (Gemma-4: >= 5.5.0), peft (>= 0.21: target_parameters), safetensors
and numpy; tests/reference/hf_parity.sh makes one (add peft with
`$VENV/bin/pip install peft==0.21.2`). --out defaults to fixtures/ beside this script.
--check writes into a temporary folder and compares with --out byte for byte (exit 1 on a
difference): the files depend only on the seeds and the package versions. The script re-runs
itself with PYTHONHASHSEED=0, since PEFT stores target_modules in set order.
"""
import argparse
import filecmp
import json
import os
import platform
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local
if os.environ.get("PYTHONHASHSEED") != "0":  # before anything builds a set of strings
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/reference
import make_random_model  # noqa: E402

import peft  # noqa: E402
import safetensors  # noqa: E402
import transformers  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]
SMALL = ["per_layer_input_gate", "per_layer_projection", "per_layer_model_projection"]
EXPERTS = ["experts.gate_up_proj", "experts.down_proj"]

# Every linear layer of each preset's decoder (what target_modules="all-linear" selects: all but
# lm_head), listed so that the choice is explicit. "proj" is the router's projection.
CASES = {
    "base": dict(targets=ATTN + MLP + ["proj"], params=EXPERTS, seed=11),
    "dense": dict(targets=ATTN + MLP, params=None, seed=12),
    "small_e2b": dict(targets=ATTN + MLP + SMALL, params=None, seed=13),
}
RANK, ALPHA = 4, 8
TARGET_CHANGE = 0.10     # RMS(adapted logits - base logits) / RMS(base logits)
MIN_ROUTER_MARGIN = 1e-3  # as make_random_model.py: no router near-ties with the adapter on
MERGED_PRESET = "small_e2b"  # the merged weights are written for this one (size)
GRAD_PRESET = "base"
RSLORA_PRESET = "dense"
# a rank-8 adapter of small_e2b on q_proj/v_proj only (PEFT's classic choice): wrong shapes and
# names for the other presets, and a rank other than theirs
BAD = dict(preset="small_e2b", rank=8, alpha=16, seed=14, targets=["q_proj", "v_proj"])


def load_hf(model_dir, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager",
                                                experts_implementation="eager")


def read_tokens(model_dir):
    with open(os.path.join(model_dir, "tokens.json")) as f:
        meta = json.load(f)
    t = np.fromfile(os.path.join(model_dir, meta["file"]), dtype="<i4")
    return torch.tensor(t.reshape(meta["batch"], meta["seq"] + 1), dtype=torch.long)


def lora_params(model):
    """[(name, parameter)] of every lora_A / lora_B, in name order."""
    return sorted(((n, p) for n, p in model.named_parameters() if ".lora_A." in n or ".lora_B." in n),
                  key=lambda x: x[0])


def randomize(model, seed, b_scale, rank):
    """A ~ N(0, 1/in), B ~ N(0, b_scale^2 / r), each tensor from its own seeded generator."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in lora_params(model):
            if ".lora_A." in name:
                std = p.shape[1] ** -0.5
            else:
                std = b_scale * rank ** -0.5
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * std)


def router_margin(model, inputs):
    """Smallest (k-th minus (k+1)-th) router logit over tokens and layers, relative to
    max(1, max |logit|); inf without MoE."""
    logits = []
    hooks = [m.register_forward_hook(lambda mod, i, o: logits.append(o.detach()))
             for n, m in model.named_modules() if n.endswith("router.proj")]
    if not hooks:
        return float("inf")
    k = model.config.top_k_experts
    with torch.no_grad():
        model(input_ids=inputs)
    for h in hooks:
        h.remove()
    worst = float("inf")
    for lg in logits:
        lg = lg.reshape(-1, lg.shape[-1]).double()
        top = torch.sort(lg, dim=-1, descending=True).values
        gap = (top[:, k - 1] - top[:, k]) / lg.abs().max(-1).values.clamp(min=1.0)
        worst = min(worst, float(gap.min()))
    return worst


def forward_logits(model, inputs):
    with torch.no_grad():
        return model(input_ids=inputs).logits.float().contiguous()


def rel_rms(a, b):
    return float((a - b).double().pow(2).mean().sqrt() / b.double().pow(2).mean().sqrt())


def make_adapter(model_dir, base_name, targets, params, seed, rank=RANK, alpha=ALPHA,
                 rslora=False, target_change=TARGET_CHANGE):
    """A PeftModel on the folder with random A and B; B scaled until the logits move by about
    target_change. Returns (peft model, base logits, info)."""
    tokens = read_tokens(model_dir)
    inputs = tokens[:, :-1]
    model = load_hf(model_dir)
    model.eval()
    base_logits = forward_logits(model, inputs)
    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets),
                     target_parameters=list(params) if params else None, lora_dropout=0.0,
                     use_rslora=rslora, task_type="CAUSAL_LM")
    pm = get_peft_model(model, cfg)
    # a path relative to the fixtures folder, never this machine's
    pm.peft_config["default"].base_model_name_or_path = base_name
    pm.eval()
    for attempt in range(20):
        s = seed * 100 + attempt
        b_scale = 0.05
        for _ in range(4):  # the change is nearly linear in B's scale: a few secant steps
            randomize(pm, s, b_scale, rank)
            change = rel_rms(forward_logits(pm, inputs), base_logits)
            b_scale *= target_change / change
        randomize(pm, s, b_scale, rank)
        change = rel_rms(forward_logits(pm, inputs), base_logits)
        margin = router_margin(pm, tokens)
        if margin > MIN_ROUTER_MARGIN:
            break
    else:
        raise RuntimeError("no adapter draw without router near-ties")
    return pm, base_logits, dict(seed=s, b_scale=b_scale, logit_change=change,
                                 router_margin=margin)


def save_adapter(pm, out_dir):
    pm.save_pretrained(out_dir)
    card = os.path.join(out_dir, "README.md")  # PEFT's empty model-card template
    if os.path.exists(card):
        os.remove(card)


def copy_model(src, dst):
    os.makedirs(dst, exist_ok=True)
    for f in ("config.json", "model.safetensors", "tokens.bin", "tokens.json"):
        if os.path.exists(os.path.join(src, f)):
            shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))


def save_merged(merged, base_dir, out_dir):
    """The merged weights under the base folder's names, with its config.json (tied lm_head not
    stored, as in the base)."""
    names = list(load_file(os.path.join(base_dir, "model.safetensors")).keys())
    state = merged.state_dict()
    missing = [n for n in names if n not in state]
    if missing:
        raise RuntimeError("merged model lacks %s" % missing[:5])
    os.makedirs(out_dir, exist_ok=True)
    save_file({n: state[n].detach().float().contiguous() for n in sorted(names)},
              os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    shutil.copyfile(os.path.join(base_dir, "config.json"), os.path.join(out_dir, "config.json"))


def adapter_key(param_name):
    """PEFT's in-memory name -> the adapter file's key (the adapter name removed)."""
    return param_name.replace(".default.", ".")


def lora_grads(pm, tokens):
    """d loss / d every lora_A/lora_B, loss = transformers' own causal-LM loss with
    labels = input_ids on the [B, S+1] tokens: the mean cross-entropy of logits[:, :S] against
    tokens[:, 1:] over all B*S targets."""
    pm.zero_grad(set_to_none=True)
    out = pm(input_ids=tokens, labels=tokens)
    out.loss.backward()
    grads = {adapter_key(n): p.grad.detach().clone() for n, p in lora_params(pm)}
    # the same loss by hand, on the [B, S] inputs, as a check of the convention
    with torch.no_grad():
        logits = pm(input_ids=tokens[:, :-1]).logits
        manual = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).double(), tokens[:, 1:].reshape(-1))
    return out.loss.item(), manual.item(), grads


def build(out, log):
    os.makedirs(out, exist_ok=True)
    here = os.getcwd()
    os.chdir(out)  # base_model_name_or_path is relative to the fixtures folder; PEFT reads it
    try:
        _build(os.path.abspath("."), log)
    finally:
        os.chdir(here)


def _build(out, log):
    torch.manual_seed(0)
    summary = {}
    work = tempfile.mkdtemp()
    try:
        for preset, case in CASES.items():
            pdir = os.path.join(out, preset)
            mdir = os.path.join(pdir, "model")
            make_random_model.make_model(os.path.join(work, preset),
                                         **make_random_model.PRESETS[preset])
            copy_model(os.path.join(work, preset), mdir)
            tokens = read_tokens(mdir)
            variants = [("lora", False)] + ([("lora_rslora", True)] if preset == RSLORA_PRESET
                                            else [])
            summary[preset] = {}
            for vname, rslora in variants:
                pm, base_logits, info = make_adapter(mdir, preset + "/model", case["targets"],
                                                     case["params"], case["seed"] + 50 * rslora,
                                                     rslora=rslora)
                save_adapter(pm, os.path.join(pdir, vname))
                peft_logits = forward_logits(pm, tokens[:, :-1])
                if preset == GRAD_PRESET and not rslora:
                    loss, manual, grads = lora_grads(pm, tokens)
                    save_file(grads, os.path.join(pdir, "lora_grads.safetensors"),
                              metadata={"format": "pt"})
                    # the same gradients in float64, to size a float32 comparison
                    pm64 = PeftModel.from_pretrained(load_hf(mdir, torch.float64),
                                                     os.path.join(pdir, vname)).double()
                    pm64.eval()
                    for n, p in lora_params(pm64):
                        p.requires_grad_(True)
                    loss64, _, grads64 = lora_grads(pm64, tokens)
                    worst = max(float((grads[k].double() - grads64[k]).norm() /
                                      grads64[k].norm()) for k in grads)
                    info.update(loss=loss, loss_manual_check=manual, loss_float64=loss64,
                                grad_tensors=len(grads),
                                grad_float32_vs_float64_max_rel=worst)
                merged = pm.merge_and_unload()
                merged_logits = forward_logits(merged, tokens[:, :-1])
                suffix = "" if not rslora else "_rslora"
                save_file({"logits_base": base_logits, "logits_peft": peft_logits,
                           "logits_merged": merged_logits, "input_ids": tokens[:, :-1].int()},
                          os.path.join(pdir, "logits%s.safetensors" % suffix),
                          metadata={"format": "pt"})
                if preset == MERGED_PRESET and not rslora:
                    save_merged(merged, mdir, os.path.join(pdir, "merged"))
                info.update(
                    peft_vs_merged_max_abs=float((peft_logits - merged_logits).abs().max()),
                    logits_max_abs=float(peft_logits.abs().max()),
                    scaling=ALPHA / (RANK ** 0.5 if rslora else RANK))
                summary[preset][vname] = info
                log("%s/%s: logits change %.3f, peft vs merged %.2e%s" % (
                    preset, vname, info["logit_change"], info["peft_vs_merged_max_abs"],
                    ", grads fp32 vs fp64 %.1e" % info["grad_float32_vs_float64_max_rel"]
                    if "grad_tensors" in info else ""))
        # bad input: an adapter of another preset at another rank
        b = BAD
        pm, _, info = make_adapter(os.path.join(out, b["preset"], "model"), b["preset"] + "/model",
                                   b["targets"], None, b["seed"], rank=b["rank"],
                                   alpha=b["alpha"])
        save_adapter(pm, os.path.join(out, "bad", "lora_r%d_%s" % (b["rank"], b["preset"])))
        summary["bad"] = info
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "versions.json"), "w") as f:
        json.dump({"python": platform.python_version(), "torch": torch.__version__,
                   "transformers": transformers.__version__, "peft": peft.__version__,
                   "safetensors": safetensors.__version__, "numpy": np.__version__},
                  f, indent=1, sort_keys=True)
        f.write("\n")


def compare_trees(a, b):
    diffs = []
    for root, _, files in os.walk(b):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), b)
            if not os.path.exists(os.path.join(a, rel)):
                diffs.append("missing in %s: %s" % (a, rel))
            elif not filecmp.cmp(os.path.join(a, rel), os.path.join(b, rel), shallow=False):
                diffs.append("differs: %s" % rel)
    for root, _, files in os.walk(a):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), a)
            if not os.path.exists(os.path.join(b, rel)):
                diffs.append("not made: %s" % rel)
    return diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "fixtures"))
    ap.add_argument("--check", action="store_true",
                    help="remake in a temporary folder and compare with --out")
    a = ap.parse_args()
    torch.set_num_threads(1)  # one thread: sums in one order, the same bytes on every run
    log = lambda s: print("make_peft_fixtures: " + s, file=sys.stderr)  # noqa: E731
    if not a.check:
        if os.path.isdir(a.out):
            shutil.rmtree(a.out)
        build(a.out, log)
        total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(a.out) for f in fs)
        log("wrote %s (%d bytes)" % (a.out, total))
        return 0
    tmp = tempfile.mkdtemp()
    try:
        build(tmp, log)
        diffs = compare_trees(a.out, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for d in diffs:
        print("make_peft_fixtures: " + d)
    print("make_peft_fixtures: %s" % ("FAILED" if diffs else "fixtures are up to date"))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())

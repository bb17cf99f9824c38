"""Compares Hugging Face transformers' own Gemma-4 with the reference (and gemmax, if given).

Run inside a virtual environment that has `transformers` (with Gemma-4) and `torch`; see
hf_parity.sh, which creates one. For each preset of make_random_model.py (or each --model
folder) it loads the folder with AutoModelForCausalLM.from_pretrained(dtype=float32), runs
HF's forward with labels on tokens [B,S+1], and compares:
  * HF logits [B,S,V] and HF's ce loss with the float64 reference;
  * with --gemmax: gemmax's logits and ce_loss with HF's.
HF computes no load-balance loss, so only ce_loss and logits are compared.
Tolerances: loss 1e-6 relative, logits max-abs error / max |logit| 1e-5.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gemma4_ref  # noqa: E402
import make_random_model  # noqa: E402
import safetensors_np  # noqa: E402

LOSS_TOL, LOGIT_TOL = 1e-6, 1e-5


def hf_forward(model_dir, tokens):
    import transformers
    from transformers import AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                     attn_implementation="eager",
                                                     experts_implementation="eager")
    except TypeError:  # transformers < 4.56 spells it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                     attn_implementation="eager",
                                                     experts_implementation="eager")
    model.eval()
    ids = torch.as_tensor(tokens, dtype=torch.long)
    with torch.no_grad():
        # HF shifts labels itself: logits at s predict ids[s+1]; the logits of the last input
        # position have no label and are dropped. Causality keeps logits[:, :S] unchanged.
        out = model(input_ids=ids, labels=ids)
    tc = model.config
    if hasattr(tc, "get_text_config"):
        tc = tc.get_text_config()
    return (out.logits[:, :-1].double(), float(out.loss), list(tc.layer_types),
            type(model).__name__, transformers.__version__)


def rel_logit_err(a, b):
    return float((a - b).abs().max() / b.abs().max())


def compare_one(name, model_dir, tokens, batch, gemmax=None):
    """Returns (ok, lines)."""
    lines, ok = [], True
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    literal_types = gemma4_ref.Config(raw).layer_types
    hf_logits, hf_loss, hf_types, cls, ver = hf_forward(model_dir, tokens)
    note = ""
    if hf_types != literal_types:
        # transformers forces the last layer to full_attention; compare HF with the reference
        # run on HF's effective layer_types, and report the rewrite.
        note = " [HF rewrote layer_types: last layer forced to full_attention]"
    ref = gemma4_ref.run(model_dir, tokens, torch.float64, lb_weight=0.0, layer_types=hf_types)
    le = rel_logit_err(hf_logits, ref["logits"])
    ce = abs(hf_loss - ref["ce_loss"]) / abs(ref["ce_loss"])
    good = le <= LOGIT_TOL and ce <= LOSS_TOL
    ok &= good
    lines.append("%-13s HF(%s %s) vs reference: logits %.2e, ce_loss %.2e (HF %.9f ref %.9f) %s%s"
                 % (name, cls, ver, le, ce, hf_loss, ref["ce_loss"], "ok" if good else "FAIL",
                    note))
    if gemmax:
        if note:
            lines.append("%-13s gemmax vs HF: skipped (HF does not run this layer_types)" % name)
            return ok, lines
        with tempfile.TemporaryDirectory() as td:
            tok_file = os.path.join(model_dir, "tokens.bin")
            lg = os.path.join(td, "L.safetensors")
            p = subprocess.run([gemmax, "grad", "--model", model_dir, "--tokens", tok_file,
                                "--batch", str(batch), "--out", os.path.join(td, "G.safetensors"),
                                "--logits", lg], capture_output=True, text=True)
            if p.returncode != 0:
                lines.append("%-13s gemmax grad failed (rc %d): %s"
                             % (name, p.returncode, p.stderr.strip()[-500:]))
                return False, lines
            gl = json.loads(p.stdout.strip().splitlines()[-1])
            g_logits = torch.as_tensor(safetensors_np.load_file(lg)["logits"]).double()
        if tuple(g_logits.shape) != tuple(hf_logits.shape):
            lines.append("%-13s gemmax logits shape %s != %s" % (name, tuple(g_logits.shape),
                                                                 tuple(hf_logits.shape)))
            return False, lines
        le = rel_logit_err(g_logits, hf_logits)
        ce = abs(gl["ce_loss"] - hf_loss) / abs(hf_loss)
        good = le <= LOGIT_TOL and ce <= LOSS_TOL
        ok &= good
        lines.append("%-13s gemmax vs HF: logits %.2e, ce_loss %.2e %s"
                     % (name, le, ce, "ok" if good else "FAIL"))
    return ok, lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gemmax", help="gemmax binary; also compare its logits/ce_loss with HF")
    ap.add_argument("--preset", action="append", help="preset(s) to run (default: all)")
    ap.add_argument("--model", action="append", default=[],
                    help="an existing folder with tokens.bin/tokens.json instead of presets")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # test-sized models: threading overhead only slows them down
    all_ok = True
    with tempfile.TemporaryDirectory() as td:
        jobs = [(os.path.basename(os.path.normpath(m)), m) for m in a.model]
        if not a.model:
            for name in a.preset or list(make_random_model.PRESETS):
                d = os.path.join(td, name)
                make_random_model.make_model(d, **make_random_model.PRESETS[name])
                jobs.append((name, d))
        for name, d in jobs:
            with open(os.path.join(d, "tokens.json")) as f:
                meta = json.load(f)
            tokens = gemma4_ref.read_tokens(os.path.join(d, meta.get("file", "tokens.bin")),
                                            meta["batch"])
            try:
                ok, lines = compare_one(name, d, tokens, meta["batch"], a.gemmax)
            except Exception as e:  # report and go on with the other configs
                ok, lines = False, ["%-13s ERROR %s: %s" % (name, type(e).__name__, e)]
            all_ok &= ok
            print("\n".join(lines), flush=True)
    print("hf_compare: %s" % ("all passed" if all_ok else "FAILURES"))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())

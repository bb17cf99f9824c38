"""gemmax vs the float64 reference: losses, logits and every gradient, on each preset model.

  /usr/bin/python3 parity.py --gemmax PATH [--gemmax-dtype float32|float64]
                             [--gemmax-backend reference|cpu] [--preset NAME ...] [--keep DIR]
  /usr/bin/python3 parity.py --self-test        # checks this script's comparison logic

For each preset of make_random_model.py: build the folder + tokens, run
  gemmax grad --model DIR --tokens FILE --batch B --out G.safetensors --logits L.safetensors
(which prints a JSON object with ce_loss, lb_loss, total_loss and writes the gradients in its
compute dtype under the folder's HF names plus `logits` [B,S,V]), run the reference in float64,
and compare:
                                                                  float32   float64
  losses      |a - b| / |b|                                       1e-6      1e-13
  logits      max |a - b| / max |b|                               1e-5      1e-13
  gradients   ||a - b|| / max(||b||, 1e-4 * ||whole gradient||)   1e-4      1e-11, per tensor
Missing or extra gradient names and shape mismatches are failures. Exit status 1 on any
failure. The float64 bounds sit at least 10x above what gemmax measures (losses <= 3e-16, logits
<= 3e-15, gradients <= 9e-13 on the presets): a defect of 1e-10 relative fails.

One allowance (float32 only): a tensor whose exact gradient is below what float32 arithmetic can
resolve may instead be off by up to NOISE_FACTOR x the error of the float32 reference on that
tensor.
This is the last layer's layer_scalar: the final RMSNorm makes the loss invariant to the scale
of the last layer's output (up to eps), so its gradient is ~1e-8 of the whole, a sum of O(1)
terms that cancel; any float32 engine gets it only to ~1e-7. (With top-1 routing the same
holds, more mildly, for router.per_expert_scale, through post_feedforward_layernorm_2.)
Tensors that use the allowance are named in the output.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gemma4_ref  # noqa: E402
import make_random_model  # noqa: E402
import safetensors_np  # noqa: E402

# (loss, logits, gradient) relative tolerances per gemmax compute dtype; see the docstring.
TOLERANCES = {"float32": (1e-6, 1e-5, 1e-4), "float64": (1e-13, 1e-13, 1e-11)}
GRAD_FLOOR = 1e-4
NOISE_FACTOR = 20.0
LOSSES = ("ce_loss", "lb_loss", "total_loss")


def compare(ref, got, noise=None, dtype="float32"):
    """ref/got: dict(ce_loss, lb_loss, total_loss: float, logits: array, grads: {name: array});
    noise: {name: ||float32 reference - float64 reference||} for the float32 allowance;
    dtype: the candidate's compute dtype, which picks the tolerances.
    Returns (ok, failures [str], summary str)."""
    noise = noise or {}
    loss_tol, logit_tol, grad_tol = TOLERANCES[dtype]
    fails = []
    for k in LOSSES:
        if k not in got or not isinstance(got[k], (int, float)) or not math.isfinite(got[k]):
            fails.append("%s missing or not finite: %r" % (k, got.get(k)))
            continue
        e = abs(got[k] - ref[k]) / max(abs(ref[k]), 1e-30)
        if e > loss_tol:
            fails.append("%s %.17g vs %.17g: rel err %.2e > %.0e"
                         % (k, got[k], ref[k], e, loss_tol))
    rl, gl = np.asarray(ref["logits"], np.float64), np.asarray(got["logits"], np.float64)
    if rl.shape != gl.shape:
        fails.append("logits shape %s vs %s" % (gl.shape, rl.shape))
        logit_err = float("inf")
    else:
        logit_err = float(np.abs(gl - rl).max() / np.abs(rl).max())
        if not logit_err <= logit_tol:
            fails.append("logits: rel max err %.2e > %.0e" % (logit_err, logit_tol))
    rg, gg = ref["grads"], got["grads"]
    for n in sorted(set(rg) - set(gg)):
        fails.append("gradient missing: " + n)
    for n in sorted(set(gg) - set(rg)):
        fails.append("gradient not a parameter: " + n)
    whole = math.sqrt(sum(float(np.sum(np.asarray(g, np.float64) ** 2)) for g in rg.values()))
    worst_name, worst, allowed = None, -1.0, []
    strict_name, strict = None, -1.0  # the plain criterion, allowance ignored
    for n in sorted(set(rg) & set(gg)):
        b, a = np.asarray(rg[n], np.float64), np.asarray(gg[n], np.float64)
        if a.shape != b.shape:
            fails.append("gradient %s shape %s vs %s" % (n, a.shape, b.shape))
            continue
        denom = max(np.linalg.norm(b), GRAD_FLOOR * whole)
        e = float(np.linalg.norm(a - b) / denom)
        tol = max(grad_tol, NOISE_FACTOR * noise.get(n, 0.0) / denom)
        if tol > grad_tol:
            allowed.append("%s (%.1e)" % (n.split("layers.")[-1], tol))
        if not e <= tol:  # also catches NaN
            fails.append("gradient %s: rel err %.2e > %.1e" % (n, e, tol))
        if not e / tol <= worst:
            worst_name, worst = n, e / tol
        if not e <= strict:
            strict_name, strict = n, e
    summary = ("losses ce %.2e lb %.2e total %.2e | logits %.2e | worst grad %s at %.2g of its "
               "tolerance" % (*[abs(got.get(k, float("nan")) - ref[k]) / max(abs(ref[k]), 1e-30)
                                for k in LOSSES], logit_err, worst_name, worst))
    if allowed:
        summary += " | fp32 allowance: " + ", ".join(allowed)
        summary += " | largest plain error: %s %.2e" % (strict_name, strict)
    return not fails, fails, summary


def reference(model_dir, tokens):
    """float64 reference results, and the float32 reference's error on each gradient."""
    r = gemma4_ref.run(model_dir, tokens, torch.float64)
    r32 = gemma4_ref.run(model_dir, tokens, torch.float32)
    noise = {n: float((r32["grads"][n].double() - g).norm()) for n, g in r["grads"].items()}
    return dict(ce_loss=r["ce_loss"], lb_loss=r["lb_loss"], total_loss=r["total_loss"],
                logits=r["logits"].numpy(),
                grads={n: g.numpy() for n, g in r["grads"].items()}), noise


def run_candidate(cmd, model_dir, tok_file, batch, work):
    """Runs `cmd --model ... --out G --logits L` (the gemmax grad contract)."""
    g, lg = os.path.join(work, "G.safetensors"), os.path.join(work, "L.safetensors")
    p = subprocess.run(cmd + ["--model", model_dir, "--tokens", tok_file, "--batch", str(batch),
                              "--out", g, "--logits", lg], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (cmd[0], p.returncode, p.stderr.strip()[-2000:]))
    losses = None
    for line in reversed(p.stdout.strip().splitlines()):  # the last JSON object printed
        try:
            losses = json.loads(line)
            break
        except ValueError:
            continue
    if not isinstance(losses, dict):
        raise RuntimeError("no JSON object with the losses on stdout: %r" % p.stdout[-500:])
    got = {k: losses.get(k) for k in LOSSES}
    got["logits"] = safetensors_np.load_file(lg)["logits"]
    got["grads"] = safetensors_np.load_file(g)
    return got


def check_presets(cmd, presets, keep=None, dtype="float32"):
    """dtype: the candidate's compute dtype; float64 has tighter tolerances and no float32
    allowance."""
    all_ok = True
    with tempfile.TemporaryDirectory() as td:
        root = keep or td
        for name in presets:
            d = os.path.join(root, name)
            meta = make_random_model.make_model(d, **make_random_model.PRESETS[name])
            tok_file = os.path.join(d, "tokens.bin")
            try:
                work = tempfile.mkdtemp(dir=td)
                got = run_candidate(cmd, d, tok_file, meta["batch"], work)
                ref, noise = reference(d, meta["tokens"])
                ok, fails, summary = compare(ref, got, noise if dtype == "float32" else None,
                                             dtype)
            except Exception as e:
                ok, fails, summary = False, ["%s: %s" % (type(e).__name__, e)], "error"
            all_ok &= ok
            print("%-13s %s  %s" % (name, "ok  " if ok else "FAIL", summary), flush=True)
            for f in fails[:20]:
                print("    " + f)
            if len(fails) > 20:
                print("    ... %d more" % (len(fails) - 20))
    return all_ok


def self_test():
    """The comparison must pass fp32-reference vs fp64-reference and fail on each defect."""
    fp32 = [sys.executable, os.path.join(HERE, "gemma4_ref.py"), "--dtype", "float32"]
    print("fp32 reference (through the gemmax CLI contract) vs fp64 reference:")
    ok = check_presets(fp32, list(make_random_model.PRESETS))
    with tempfile.TemporaryDirectory() as td:
        meta = make_random_model.make_model(td, **make_random_model.PRESETS["odd_sizes"])
        ref, noise = reference(td, meta["tokens"])
        name = "model.layers.2.router.per_expert_scale"
        base = dict(ref, grads=dict(ref["grads"]))

        def variant(**kw):
            v = dict(base, grads=dict(base["grads"]))
            v.update(kw)
            return v
        bad = {
            "grad x(1+1e-3)": variant(grads=dict(base["grads"],
                                                 **{name: ref["grads"][name] * 1.001})),
            "grad missing": variant(grads={n: g for n, g in base["grads"].items() if n != name}),
            "grad extra": variant(grads=dict(base["grads"], **{"lm_head.weight": np.zeros(3)})),
            "grad NaN": variant(grads=dict(base["grads"], **{name: ref["grads"][name] * np.nan})),
            "grad shape": variant(grads=dict(base["grads"], **{name: ref["grads"][name][:-1]})),
            "lb_loss +1e-5": variant(lb_loss=ref["lb_loss"] * (1 + 1e-5)),
            "logits +1e-4": variant(logits=ref["logits"] + 1e-4 * np.abs(ref["logits"]).max()),
        }
        print("identical copy must pass, each defect must fail:")
        same_ok = compare(ref, base, noise)[0]
        print("  %-16s %s" % ("identical", "ok" if same_ok else "WRONG"))
        ok &= same_ok
        for what, v in bad.items():
            caught = not compare(ref, v, noise)[0]
            print("  %-16s %s" % (what, "caught" if caught else "MISSED"))
            ok &= caught
        # The float64 tolerances: the reference itself passes, and a defect the float32
        # tolerances let through (1e-5 on a gradient, 1e-10 on a loss) does not.
        bad64 = {
            "grad x(1+1e-10)": variant(grads=dict(base["grads"],
                                                  **{name: ref["grads"][name] * (1 + 1e-10)})),
            "grad x(1+1e-5)": variant(grads=dict(base["grads"],
                                                 **{name: ref["grads"][name] * (1 + 1e-5)})),
            "ce_loss +1e-12": variant(ce_loss=ref["ce_loss"] * (1 + 1e-12)),
            "logits +1e-12": variant(logits=ref["logits"] + 1e-12 * np.abs(ref["logits"]).max()),
        }
        print("float64 tolerances: identical copy must pass, each defect must fail:")
        same_ok = compare(ref, base, None, "float64")[0]
        print("  %-16s %s" % ("identical", "ok" if same_ok else "WRONG"))
        ok &= same_ok
        for what, v in bad64.items():
            caught = not compare(ref, v, None, "float64")[0]
            print("  %-16s %s" % (what, "caught" if caught else "MISSED"))
            ok &= caught
        ok &= compare(ref, bad64["grad x(1+1e-5)"], noise)[0]  # within float32's criterion
    print("parity self-test: %s" % ("passed" if ok else "FAILED"))
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gemmax", help="the gemmax binary")
    ap.add_argument("--gemmax-dtype", default="float32", choices=["float32", "float64"],
                    help="gemmax's compute dtype; float64 is checked without the float32 allowance")
    ap.add_argument("--gemmax-backend", default="reference", choices=["reference", "cpu", "cuda", "cuda_emulated"],
                    help="gemmax's backend (cpu, cuda and cuda_emulated in float32)")
    ap.add_argument("--preset", action="append", help="preset(s) to run (default: all)")
    ap.add_argument("--keep", help="write the model folders here instead of a temp dir")
    ap.add_argument("--self-test", action="store_true", help="test this script's comparisons")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)  # test-sized models: threading overhead only slows them down
    if a.self_test:
        return 0 if self_test() else 1
    if not a.gemmax:
        ap.error("--gemmax PATH (or --self-test) is required")
    presets = a.preset or list(make_random_model.PRESETS)
    cmd = [os.path.abspath(a.gemmax), "grad", "--dtype", a.gemmax_dtype,
           "--backend", a.gemmax_backend]
    ok = check_presets(cmd, presets, a.keep, a.gemmax_dtype)
    print("parity: %s" % ("all passed" if ok else "FAILURES"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Compares the model gemmax reads from MaxText's own config files with MaxText's parse of them.

Run by maxtext_config_check.sh in a virtual environment where `maxtext` (PyPI) imports:

    python maxtext_config_check.py --gemmax build/bin/gemmax

For MaxText's base.yml with each Gemma-4 model_name, each Gemma-4 model file given alone, and
the seed workload's command line, it runs `gemmax train ... dry_run=true` and compares every
model dimension gemmax reports (its `model:` line, in MaxText's key names) with MaxText's
pyconfig on the same base.yml and model_name. A model gemmax does not build must stop with a
clear error (exit 1, a line starting `error:`), never a crash. Exit status 1 if any check fails.
"""

import argparse
import os
import subprocess
import sys

MODELS = ["gemma4-26b", "gemma4-31b", "gemma4-e2b", "gemma4-e4b"]
SEED = ["per_device_batch_size=2", "max_target_length=16384", "ici_fsdp_parallelism=128",
        "remat_policy=full", "sparse_matmul=true", "megablox=true", "use_iota_embed=false",
        "num_vocab_tiling=16", "dataset_type=synthetic"]
# MaxText running its parser on this CPU machine (no TPU, no distributed system).
MAXTEXT_HOST = ["hardware=cpu", "skip_jax_distributed_system=true", "run_name=check"]


def maxtext_parse(base_yml, overrides):
  from maxtext.configs import pyconfig  # pylint: disable=import-outside-toplevel
  return pyconfig.initialize(["train", base_yml] + MAXTEXT_HOST + overrides)


def same(gemmax_text, maxtext_value):
  if hasattr(maxtext_value, "value"):  # an enum (decoder_block): its config-file spelling
    maxtext_value = maxtext_value.value
  if isinstance(maxtext_value, bool):
    return gemmax_text == ("true" if maxtext_value else "false")
  if isinstance(maxtext_value, (int, float)):
    try:
      return abs(float(gemmax_text) - float(maxtext_value)) <= 1e-12 * max(1.0, abs(maxtext_value))
    except ValueError:
      return False
  return gemmax_text == str(maxtext_value)


def run_gemmax(gemmax, args):
  p = subprocess.run([gemmax, "train"] + args + ["dry_run=true"], capture_output=True, text=True,
                     check=False)
  out = p.stdout + p.stderr
  model = next((l[len("model: "):] for l in out.splitlines() if l.startswith("model: ")), None)
  error = next((l for l in out.splitlines() if l.startswith("error:")), None)
  return p.returncode, model, error


def check(name, gemmax, gemmax_args, base_yml, model_name, extra):
  rc, model, error = run_gemmax(gemmax, gemmax_args)
  try:
    cfg = maxtext_parse(base_yml, [f"model_name={model_name}"] + extra)
    maxtext_error = None
  except Exception as e:  # pylint: disable=broad-exception-caught
    cfg, maxtext_error = None, f"{type(e).__name__}: {e}"
  print(f"== {name}")
  print(f"   gemmax train {' '.join(gemmax_args)} dry_run=true")
  if maxtext_error:
    print(f"   MaxText's parse failed: {maxtext_error.splitlines()[0][:300]}")
  if model is None:
    crashed = rc != 1 or error is None
    print(f"   gemmax: {'CRASH (exit ' + str(rc) + ')' if crashed else 'refused'}: {error}")
    if cfg is not None:
      print(f"   MaxText: decoder_block={cfg.decoder_block} base_num_decoder_layers="
            f"{cfg.base_num_decoder_layers} base_emb_dim={cfg.base_emb_dim} num_experts="
            f"{cfg.num_experts}")
    return not crashed
  if cfg is None:
    return False
  ok = True
  compared = 0
  for item in model.split():
    key, value = item.split("=", 1)
    if key == "model_name":
      continue
    theirs = getattr(cfg, key)
    if key == "global_num_kv_heads" and theirs == 0:  # MaxText's 0: as the sliding layers
      theirs = cfg.base_num_kv_heads
    compared += 1
    if not same(value, theirs):
      ok = False
      print(f"   DIFFERS {key}: gemmax {value}, MaxText {theirs}")
  print(f"   {compared} model keys compared: {'all equal' if ok else 'DIFFERENCES'}")
  return ok


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--gemmax", required=True)
  args = ap.parse_args()
  import maxtext  # pylint: disable=import-outside-toplevel
  configs = os.path.join(os.path.dirname(maxtext.__file__), "configs")
  base = os.path.join(configs, "base.yml")
  print(f"MaxText {getattr(maxtext, '__version__', '?')} configs: {configs}")
  results = []
  for m in MODELS:
    # MaxText refuses scanned layers for the KV-shared gemma4_small block.
    extra = ["scan_layers=false"] if m in ("gemma4-e2b", "gemma4-e4b") else []
    results.append(check(f"base.yml model_name={m}", args.gemmax,
                         [base, f"model_name={m}"] + extra, base, m, extra))
    model_file = os.path.join(configs, "models", f"{m}.yml")
    results.append(check(f"models/{m}.yml alone", args.gemmax, [model_file] + extra, base, m, extra))
  results.append(check("the seed workload's command line", args.gemmax,
                       [base, "model_name=gemma4-26b"] + SEED, base, "gemma4-26b", SEED))
  failed = results.count(False)
  print(f"{len(results) - failed} of {len(results)} checks passed")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())

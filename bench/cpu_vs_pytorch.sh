#!/bin/sh
# gemmax against the PyTorch baseline (bench/pytorch_baseline.py) in one run: the same model,
# batch, sequence and thread count, one after the other on the same machine: gemmax, PyTorch
# eager, PyTorch with torch.compile (each the faster of bf16 autocast and fp32). Prints each and
# the ratio of gemmax's tokens/s to each and to the faster PyTorch, and gemmax's model TFLOP/s
# as a fraction of the best instruction peak measured in its run.
#
#   bench/cpu_vs_pytorch.sh [BUILD_DIR] [PYTHON] [key=value ...]
#
# PYTHON: a python3 with torch (a PyPI torch in a virtual environment); default python3.
# THREADS (default 2), BATCH (4), SEQ (1024), MODEL (gemma4-small) come from the environment;
# key=value arguments go to `gemmax bench` (e.g. num_vocab_tiling=4).
set -e
build=${1:-build}
py=${2:-python3}
[ $# -ge 2 ] && shift 2 || shift $#
threads=${THREADS:-2}
batch=${BATCH:-4}
seq=${SEQ:-1024}
model=${MODEL:-gemma4-small}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$build/bin/gemmax" bench model_name="$model" num_threads="$threads" \
  per_device_batch_size="$batch" max_target_length="$seq" "$@" --json "$out/gemmax.json"
echo
for mode in eager compiled; do
  flag=; [ $mode = compiled ] && flag=--compile
  "$py" "$here/pytorch_baseline.py" --model "$model" --threads "$threads" --batch "$batch" \
    --seq "$seq" $flag --json "$out/torch_$mode.json" || echo "(PyTorch $mode: no result)"
  echo
done
python3 - "$out/gemmax.json" "$out/torch_eager.json" "$out/torch_compiled.json" <<'PY'
import json, os, sys
g, *torch_runs = (json.load(open(p)) for p in sys.argv[1:] if os.path.exists(p))
print("gemmax  %8.1f tokens/s  (%s)" % (g["tokens_per_sec"], g["backend"]))
for t in torch_runs:
    print("pytorch %8.1f tokens/s  (torch %s, %s, attention %s%s)  gemmax/pytorch %.2f x" % (
        t["tokens_per_sec"], t["torch"], t.get("dtype", "bf16"), t["attention"],
        ", compiled" if t["compiled"] else "",
        g["tokens_per_sec"] / t["tokens_per_sec"]))
best = max(t["tokens_per_sec"] for t in torch_runs)
print("ratio to the faster pytorch: %.2f x" % (g["tokens_per_sec"] / best))
print("model TFLOP/s / dense bf16 matmul rate: %.3f" % g["model_over_dense"])
if "model_over_best_peak" in g:
    print("model TFLOP/s / best instruction peak: %.3f (%s)" % (g["model_over_best_peak"],
                                                              g["best_peak"]))
PY

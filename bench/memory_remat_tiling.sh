#!/bin/sh
# Peak memory (by category) and step time of gemma4-small under remat none / minimal / full and
# num_vocab_tiling 1 / 4 / 16, in bf16 (MaxText's default), plus fp32 for comparison; all runs
# one after the other in one invocation, so the ratios compare like with like.
#
#   bench/memory_remat_tiling.sh [path/to/gemmax] [key=value ...]
#
# Defaults: per_device_batch_size=1 at the preset's max_target_length=1024, steps=2 (the time
# is the second step's: the first also touches fresh memory), synthetic data. Extra key=value
# arguments go to every run (e.g. max_target_length=256 for a quick look). Prints a Markdown
# table; each run's memory.json (planned and measured bytes) stays under $OUT (default: a
# temporary folder).
set -e
GEMMAX=${1:-build/bin/gemmax}
[ $# -gt 0 ] && shift
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
COMMON="model_name=gemma4-small dataset_type=synthetic per_device_batch_size=1 steps=2 log_period=1000 base_output_directory=$OUT $*"

run() {  # run NAME key=value...
  name=$1
  shift
  "$GEMMAX" train $COMMON run_name="$name" "$@" > "$OUT/$name.log" 2>&1 ||
    { echo "run $name failed:"; tail -5 "$OUT/$name.log"; exit 1; }
}

for dtype in bfloat16 float32; do
  for remat in none minimal full; do
    for tiles in 1 4 16; do
      # fp32 only for the untiled column: enough for the bf16 / fp32 ratios.
      [ "$dtype" = float32 ] && [ "$tiles" != 1 ] && continue
      run "${dtype}_${remat}_${tiles}" dtype=$dtype remat_policy=$remat num_vocab_tiling=$tiles
    done
  done
done

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
MiB = 1 << 20
rows = []
for name in sorted(os.listdir(out)):
    path = os.path.join(out, name, "memory.json")
    if not os.path.exists(path):
        continue
    dtype, remat, tiles = name.split("_")
    mem = json.load(open(path))
    steps = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl"))]
    rows.append((dtype, ["none", "minimal", "full"].index(remat), remat, int(tiles), mem,
                 steps[-1]["perf/step_time_seconds"]))
rows.sort(key=lambda r: (r[0] != "bfloat16", r[1], r[3]))
base = next(r for r in rows if r[0] == "bfloat16" and r[2] == "none" and r[3] == 1)
print("| dtype | remat | tiles | saved activations | workspace | params+grads+opt | "
      "total peak (planned) | vs none/1 | step s | vs none/1 |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for dtype, _, remat, tiles, mem, t in rows:
    m, p = mem["measured"], mem["planned"]
    static = m["parameters"] + m["gradients"] + m["optimizer"]
    print(f"| {dtype} | {remat} | {tiles} | {m['activations']/MiB:.1f} MiB | "
          f"{m['workspace']/MiB:.1f} MiB | {static/MiB:.1f} MiB | "
          f"{m['total']/MiB:.1f} MiB ({p['total']/MiB:.1f}) | "
          f"{m['total']/base[4]['measured']['total']:.2f} | {t:.2f} | {t/base[5]:.2f} |")
PY
echo "(runs in $OUT)"

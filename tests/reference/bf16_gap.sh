#!/usr/bin/env bash
# gemmax's own loss curves, fp32 beside bf16, for each initialisation scheme and seed: the mean
# loss per window of steps and the bf16 gap (bf16 over fp32, in %). Not part of CI (a few
# minutes on 2 cores). Each (scheme, dtype, seed) is one `gemmax train` on the built-in corpus;
# the seed sets both init_weights_seed and data_shuffle_seed. Extra arguments go to every run.
#
#   tests/reference/bf16_gap.sh --gemmax build/bin/gemmax [--steps 300] [--seeds "0 1"]
#       [--schemes "hf maxtext"] [--windows "100:120 280:300"] [--out DIR] [key=value ...]
set -euo pipefail
gemmax=build/bin/gemmax steps=300 seeds="0 1" schemes="hf maxtext" windows="100:120 280:300"
out=$(mktemp -d /tmp/gemmax_bf16_gap.XXXXXX)
extra=()
while (($#)); do
  case $1 in
    --gemmax) gemmax=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --schemes) schemes=$2; shift 2 ;;
    --windows) windows=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *=*) extra+=("$1"); shift ;;
    *) echo "bf16_gap.sh: unknown argument '$1' (see the header for usage)" >&2; exit 2 ;;
  esac
done
[[ -x $gemmax ]] || { echo "bf16_gap.sh: no gemmax binary at '$gemmax' (--gemmax PATH)" >&2; exit 2; }
mkdir -p "$out"
for scheme in $schemes; do
  for dtype in float32 bfloat16; do
    for seed in $seeds; do
      run=${scheme}_${dtype}_s${seed}
      [[ -s $out/$run/metrics.jsonl ]] && continue  # a finished run is kept: rerun to resume
      "$gemmax" train model_name=gemma4-tiny steps="$steps" dtype="$dtype" init_scheme="$scheme" \
        init_weights_seed="$seed" data_shuffle_seed="$seed" base_output_directory="$out" \
        run_name="$run" enable_checkpointing=false sample_max_new_tokens=0 "${extra[@]}" \
        > "$out/$run.log" 2>&1 || { echo "bf16_gap.sh: $run failed, see $out/$run.log" >&2; exit 1; }
    done
  done
done
python3 - "$out" "$schemes" "$seeds" "$windows" <<'PY'
import json, sys
out, schemes, seeds, windows = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
wins = [tuple(int(x) for x in w.split(":")) for w in windows]
def losses(run):
    with open(f"{out}/{run}/metrics.jsonl") as f:
        return {r["step"]: r["learning/loss"] for r in map(json.loads, f)}
def mean(curve, a, b):
    v = [curve[s] for s in range(a, b) if s in curve]
    return sum(v) / len(v)
print(f"gemma4-tiny, built-in corpus; mean loss over steps [a, b); gap = bf16 / fp32 - 1")
print(f"{'init':8} {'window':>9} " + " ".join(f"{'fp32 s' + s:>9} {'bf16 s' + s:>9} {'gap s' + s:>8}" for s in seeds)
      + f" {'mean gap':>9}")
for scheme in schemes:
    for a, b in wins:
        row, gaps = [], []
        for s in seeds:
            f = mean(losses(f"{scheme}_float32_s{s}"), a, b)
            h = mean(losses(f"{scheme}_bfloat16_s{s}"), a, b)
            gaps.append(100 * (h / f - 1))
            row.append(f"{f:9.4f} {h:9.4f} {gaps[-1]:7.2f}%")
        print(f"{scheme:8} {f'[{a},{b})':>9} " + " ".join(row) + f" {sum(gaps) / len(gaps):8.2f}%")
PY

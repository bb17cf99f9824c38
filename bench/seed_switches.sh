#!/bin/sh
# The seed's compute changes, each off vs on, with gemmax bench in one run (docs/SEED.md):
# step time and the op families the change touches.
#   bench/seed_switches.sh [BUILD_DIR] [key=value ...]
set -e
build=${1:-build}
[ $# -ge 1 ] && shift
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {  # name, then the switch settings
  name=$1
  shift
  "$build/bin/gemmax" bench --warmup 1 --steps 3 "$@" --json "$out/$name.json" > "$out/$name.txt"
  python3 - "$out/$name.json" "$name" "$*" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
f = {k: v["seconds"] for k, v in j["time_by_family"].items()}
print("%-28s %-40s %7.3f s %8.1f tok/s | gmm %.3f  routing %.3f  norms %.3f  head %.3f" % (
    sys.argv[2], sys.argv[3], j["step_seconds_median"], j["tokens_per_sec"],
    f["grouped matmul"], f["routing and permute/combine"], f["norms and elementwise"],
    f["head and loss"]))
PY
}
run all_on "$@"
run norm_scale_bf16 norm_scale_in_fp32=false "$@"
run permute_combine_explicit moe_fuse_permute_combine=false "$@"
run gate_up_split moe_fused_gate_up=false "$@"
run dlhs_transposed_copy moe_dlhs_in_place=false "$@"
run vocab_tiling_4 num_vocab_tiling=4 "$@"
run vocab_tiling_16 num_vocab_tiling=16 "$@"
run all_on_again "$@"

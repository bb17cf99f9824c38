#!/bin/sh
# FSDP on gemma4-small: one rank with the whole batch against 2 and 3 ranks, and each of the
# seed's sharding switches off against on. For every run: the step time, what one step's
# collectives moved per rank (perf/comm_*: all-gathered, reduce-scattered, all-reduced payload
# bytes, and all-to-all bytes sent), the seconds a rank waited on them, and the per-rank memory
# (planned = measured).
#
#   bench/fsdp_small.sh [path/to/gemmax] [key=value ...]
#
# Defaults: per_device_batch_size=1 per rank (the 1-rank run takes the global batch), the
# preset's max_target_length=1024, synthetic data, bf16, steps=3 (figures are the mean of the
# steps after the first). Extra key=value arguments go to every run (e.g. max_target_length=256
# for a quick look). mpirun gets --oversubscribe (3 ranks on 2 cores) and --allow-run-as-root.
# Each rank runs one OpenMP thread; the 1-rank run gets as many as there are ranks in the
# comparison (OMP_NUM_THREADS=2), so every run uses the same cores. Runs stay under $OUT.
# ONLY="r2_tiles2_sequence r2_tiles2_batch" runs just the named runs.
set -e
GEMMAX=${1:-build/bin/gemmax}
[ $# -gt 0 ] && shift
OUT=${OUT:-$(mktemp -d)}
MPIRUN=${MPIRUN:-mpirun --oversubscribe --allow-run-as-root}
mkdir -p "$OUT"
COMMON="model_name=gemma4-small dataset_type=synthetic steps=3 log_period=1000
enable_checkpointing=false sample_max_new_tokens=0 base_output_directory=$OUT $*"

run() {  # run NAME RANKS key=value...
  name=$1 ranks=$2
  shift 2
  if [ -n "$ONLY" ]; then
    case " $ONLY " in *" $name "*) ;; *) return 0 ;; esac
  fi
  if [ "$ranks" = 1 ]; then
    OMP_NUM_THREADS=2 "$GEMMAX" train $COMMON run_name="$name" "$@" > "$OUT/$name.log" 2>&1
  else
    OMP_NUM_THREADS=1 $MPIRUN -np "$ranks" "$GEMMAX" train $COMMON run_name="$name" "$@" \
      > "$OUT/$name.log" 2>&1
  fi || { echo "run $name failed:"; tail -5 "$OUT/$name.log"; exit 1; }
}

run r1_whole_batch2 1 per_device_batch_size=2
run r2_default 2 per_device_batch_size=1
run r2_vectors_sharded 2 per_device_batch_size=1 fsdp_replicate_small_params=false
run r2_embedding_gather 2 per_device_batch_size=1 fsdp_embedding=gather
run r2_embedding_vocab_parallel 2 per_device_batch_size=1 fsdp_embedding=vocab_parallel
run r2_no_prefetch 2 per_device_batch_size=1 fsdp_prefetch_layers=0
# Seed change 5: the head's 2 tiles along each rank's sequence, or along the global batch's rows
# (vocab_tiling_axis=batch: the head's input and its gradient re-laid out by all-to-alls).
run r2_tiles2_sequence 2 per_device_batch_size=1 num_vocab_tiling=2
run r2_tiles2_batch 2 per_device_batch_size=1 num_vocab_tiling=2 vocab_tiling_axis=batch
run r1_whole_batch3 1 per_device_batch_size=3
run r3_default 3 per_device_batch_size=1
run r3_vectors_sharded 3 per_device_batch_size=1 fsdp_replicate_small_params=false
run r3_embedding_gather 3 per_device_batch_size=1 fsdp_embedding=gather
run r3_embedding_vocab_parallel 3 per_device_batch_size=1 fsdp_embedding=vocab_parallel

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
MiB = 1 << 20
print("| run | step s | all-gather / step | reduce-scatter / step | all-reduce / step | "
      "all-to-all / step | waited s / step | params+grads+opt per rank | "
      "total peak per rank (planned) | loss step 0 |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for name in sorted(os.listdir(out)):
    path = os.path.join(out, name, "metrics.jsonl")
    if not os.path.exists(path):
        continue
    steps = [json.loads(l) for l in open(path)]
    later = steps[1:] or steps
    mean = lambda k: sum(s.get(k, 0) for s in later) / len(later)
    mem = json.load(open(os.path.join(out, name, "memory.json")))
    ranks = mem.get("measured_per_rank", [mem["measured"]])
    p = mem["planned"]
    static = max(r["parameters"] + r["gradients"] + r["optimizer"] for r in ranks)
    total = max(r["total"] for r in ranks)
    print(f"| {name} | {mean('perf/step_time_seconds'):.2f} | "
          f"{mean('perf/comm_all_gather_bytes')/MiB:.1f} MiB | "
          f"{mean('perf/comm_reduce_scatter_bytes')/MiB:.1f} MiB | "
          f"{mean('perf/comm_all_reduce_bytes')/MiB:.2f} MiB | "
          f"{mean('perf/comm_all_to_all_bytes')/MiB:.2f} MiB | "
          f"{mean('perf/comm_wait_seconds'):.2f} | {static/MiB:.1f} MiB | "
          f"{total/MiB:.1f} MiB ({p['total']/MiB:.1f}) | {steps[0]['learning/loss']:.6f} |")
PY
echo "(runs in $OUT)"

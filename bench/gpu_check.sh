#!/bin/bash
# The cuda backend's check on a GPU machine, in stages that each have their own time limit and
# write their results as they go (OUT/summary.txt, OUT/<stage>.log, OUT/summary.json):
#
#   1 tests       the */gpu_simple tests, then the */gpu tests (each in its own process, so that
#                 a fault in a tensor-core kernel cannot hide the plain kernels' results), every
#                 launch synchronised and checked (cuda_sync_check), naming a faulting kernel
#   2 sanitizers  compute-sanitizer racecheck, synccheck and memcheck on the grouped-matmul and
#                 attention tests of each path (mma.sync, the sm90 forward and backward)
#   3 bench       gemma4-26b-a4b with 6 layers at the seed's width and batch; then attention
#                 forward and backward at its sliding (head_dim 256) and global (512) layers on
#                 each path (cuda_attention=mma, sm90, cudnn; TFLOP/s, gemmax bench --attention);
#                 then the grouped matmuls at the expert shapes (forward, dlhs, drhs): CUTLASS's
#                 sm90 grouped GEMM beside both own paths (cuda_gmm=mma and sm90) and cuBLASLt's
#                 dense rate in one process (bench/cutlass/gmm_cutlass, after its /gpu test), or,
#                 in a build without CUTLASS, both own paths from one step of one layer each
#   4 pytorch     the PyTorch baseline of the same step on the same GPU
#   5 parity      the float32 parity of the cuda backend with the PyTorch reference
#   6 fsdp        mpirun -np N gemmax train backend=cuda, on machines with N > 1 GPUs (and an
#                 MPI + NCCL build)
#
# Stages 1-3 fit one call of under 8 minutes, 4-6 a second one:
#
#   bench/gpu_check.sh --prebuilt DIR --stages 1-3 [OUT]
#   bench/gpu_check.sh --prebuilt DIR --stages 4-6 [OUT]
#   bench/gpu_check.sh --dry-run --prebuilt build [OUT]   # rehearsal on cuda_emulated (CI)
#
# --prebuilt DIR: the binaries made beforehand by bench/build_gpu_prebuilt.sh (DIR/bin/gemmax and
# DIR/bin/gemmax_tests, their libraries in DIR/lib), or a build tree (DIR/bin/gemmax,
# DIR/tests/gemmax_tests). Without it the script builds first (minutes of the GPU's window).
# --dry-run runs every stage here, on backend=cuda_emulated at tiny sizes, to test the script.
# OUT defaults to $OUT, else gpu_check_out. GPU_CHECK_SECONDS caps the whole call (default 470;
# 900 for a dry run); GEMMAX_PYTHON names the python3 with torch (default python3).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
prebuilt="" dry=0 stages="1-6" out=""
while [ $# -gt 0 ]; do
  case $1 in
    --prebuilt) prebuilt=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --stages) stages=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "gpu_check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
out=${out:-${OUT:-gpu_check_out}}
budget=${GPU_CHECK_SECONDS:-$([ $dry -eq 1 ] && echo 900 || echo 470)}
python=${GEMMAX_PYTHON:-python3}  # the python3 with torch (stages 4 and 5)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
status=0
: > "$out/summary.txt"
note() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$out/summary.txt"; }
left() { echo $((budget - ($(date +%s) - start))); }
wanted() {  # is stage $1 in --stages (a list like 1-3 or 1,3,5)?
  local part
  for part in ${stages//,/ }; do
    if [[ $part == *-* ]]; then
      [ "$1" -ge "${part%-*}" ] && [ "$1" -le "${part#*-}" ] && return 0
    elif [ "$1" -eq "$part" ]; then
      return 0
    fi
  done
  return 1
}
# stage NAME LIMIT CMD...: runs CMD with at most min(LIMIT, time left - $reserve) seconds, where
# reserve keeps the benchmark's minimum for it; OUT/NAME.log.
reserve=0
stage() {
  local name=$1 limit=$2
  shift 2
  local t
  t=$(($(left) - reserve))
  [ "$t" -gt "$limit" ] && t=$limit
  if [ "$t" -lt 10 ]; then
    note "$name: SKIPPED (out of time)"
    status=1
    return 1
  fi
  note "$name: running (limit ${t} s)"
  timeout --kill-after=10 "$t" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[==========\] 0 tests from" "$out/$name.log"; then
    note "$name: FAILED (no test matched its filter; $name.log)"
    status=1
    return 1
  elif [ $rc -eq 0 ]; then
    note "$name: ok"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    note "$name: FAILED (out of its ${t} s; $name.log)"
    status=1
  else
    note "$name: FAILED (exit $rc; $name.log)"
    status=1
  fi
  return $rc
}
skip() { note "$1: skipped ($2)"; }

# ---- the binaries ------------------------------------------------------------------------------
find_bin() {  # the first of DIR/bin/NAME, DIR/tests/NAME, DIR/NAME
  local d
  for d in "$prebuilt/bin" "$prebuilt/tests" "$prebuilt"; do
    [ -x "$d/$1" ] && { echo "$(cd "$d" && pwd)/$1"; return 0; }
  done
  return 1
}
if [ -z "$prebuilt" ]; then
  note "no --prebuilt: building here (bench/build_gpu_prebuilt.sh beforehand saves these minutes)"
  "$here/bench/build_gpu_prebuilt.sh" "$work/prebuilt" > "$out/build.log" 2>&1 || {
    note "build: FAILED (build.log)"
    tail -30 "$out/build.log"
    exit 1
  }
  prebuilt=$work/prebuilt
fi
gemmax=$(find_bin gemmax) || { note "no gemmax binary under $prebuilt"; exit 1; }
tests=$(find_bin gemmax_tests) || { note "no gemmax_tests binary under $prebuilt"; exit 1; }
# What the loader maps: the engine behind the static bin/gemmax, the tests, and the cuda module.
linked=("$(dirname "$gemmax")/gemmax-engine" "$tests")
[ -f "$(dirname "$gemmax")/libgemmax_cuda.so" ] && linked+=("$(dirname "$gemmax")/libgemmax_cuda.so")

if [ $dry -eq 1 ]; then
  backend=cuda_emulated simple_tests=emulated_simple fast_tests=emulated
  note "dry run: every stage on backend=cuda_emulated at tiny sizes ($prebuilt)"
else
  backend=cuda simple_tests=gpu_simple fast_tests=gpu
  note "gemmax gpu check of $prebuilt, output in $out"
fi
{
  nvidia-smi || true
  git -C "$here" log -1 --format='commit %H %s' 2>/dev/null || true
  ldd "${linked[@]}" 2>&1
} > "$out/machine.txt" 2>&1

# The CUDA libraries the binaries were not built with statically (cuBLASLt, NCCL) must be the
# machine's: found in the usual places, or in the nvidia-* Python wheels of PyTorch.
if ldd "${linked[@]}" 2>/dev/null | grep -q "not found"; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/*/lib \
      $(python3 -c 'import glob, site; print(" ".join(p for s in site.getsitepackages()
        for p in glob.glob(s + "/nvidia/*/lib")))' 2>/dev/null); do
    [ -d "$d" ] && LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
  export LD_LIBRARY_PATH
  missing=$(ldd "${linked[@]}" 2>/dev/null | grep "not found" | sort -u)
  if [ -n "$missing" ]; then
    note "libraries: missing on this machine (the CUDA 13 libraries must be installed):"
    echo "$missing" | tee -a "$out/summary.txt"
    exit 1
  fi
fi

# ---- 1: the tests ------------------------------------------------------------------------------
wanted 3 && reserve=180  # stages 1 and 2 leave the benchmark at least this
export GEMMAX_TEST_CUDA_SYNC_CHECK=1
if wanted 1; then
  if [ $dry -eq 1 ]; then
    filter_for() {
      echo "*OpConformance.FillCopyAndElementwise/cuda_$1:*CudaBackend.SlowFallback*/$1"
    }
  else
    # The conformance suite names its backends cuda_*; */gpu takes in the kernel suites' GPU
    # cases (GmmSm90, the sm90 attention's, CudnnAttentionGpu: cuDNN against the reference
    # and the mma kernels).
    filter_for() { echo "*/$1:*/cuda_$1"; }
  fi
  for kind in $simple_tests $fast_tests; do
    stage "tests_$kind" "$([ "$kind" = "$simple_tests" ] && echo 70 || echo 100)" "$tests" \
      --gtest_filter="$(filter_for "$kind")" --gtest_output="xml:$out/tests_$kind.xml"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|^\[  FAILED  \]" "$out/tests_$kind.log" |
      sort -u | tee -a "$out/summary.txt"
  done
fi
unset GEMMAX_TEST_CUDA_SYNC_CHECK

# ---- 2: the sanitizers ---------------------------------------------------------------------------
if wanted 2; then
  if [ $dry -eq 1 ]; then  # the command, on two short tests
    sanitized="*OpConformance.GroupSizesThatDoNotAddUpAreReported/cuda_emulated"
    sanitized="$sanitized:*OpConformance.AttentionDecodeOverARingOfSlots/cuda_emulated"
  else
    sanitized="*OpConformance.GroupedMatmulsWithMapsAndWindows/cuda_gpu"
    sanitized="$sanitized:*GmmSm90.MatchesTheReferenceAndTheMmaKernelWithMapsWindowsAndEmptyGroups/gpu"
    sanitized="$sanitized:*GmmSm90.DlhsMatchesTheReferenceAndTheMmaKernelWithMapsWindowsAndEmptyGroups/gpu"
    sanitized="$sanitized:*GmmSm90.DrhsMatchesTheReferenceAndTheMmaKernelWithMapsWindowsAndEmptyGroups/gpu"
    sanitized="$sanitized:*AttentionSm90Bwd.GroupsOfTwoSlidingWindowAndSegments/gpu"
    sanitized="$sanitized:*AttentionSm90.HeadDim256MatchesTheReferenceAndTheMmaKernel/gpu"
    sanitized="$sanitized:*OpConformance.AttentionForwardAndBackward/cuda_gpu"
  fi
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null |
    head -1)
  for tool in racecheck synccheck memcheck; do
    if [ -n "$sanitizer" ]; then
      stage "sanitizer_$tool" 45 "$sanitizer" --tool "$tool" --error-exitcode 1 \
        "$tests" --gtest_filter="$sanitized"
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Program hit|Invalid" "$out/sanitizer_$tool.log" |
        head -5 | tee -a "$out/summary.txt"
    elif [ $dry -eq 1 ]; then  # rehearse the command without the tool
      stage "sanitizer_$tool" 45 "$tests" --gtest_filter="$sanitized"
    else
      skip "sanitizer_$tool" "no compute-sanitizer on this machine: the sanitizers did NOT run"
    fi
  done
fi

# ---- 3: the benchmark -------------------------------------------------------------------------
if [ $dry -eq 1 ]; then
  model="model_name=gemma4-tiny base_num_decoder_layers=2 per_device_batch_size=1"
  model="$model max_target_length=64 remat_policy=full dtype=bfloat16 num_vocab_tiling=2"
  steps="--warmup 0 --steps 1"
  torch_args="--device cpu --model gemma4-tiny --layers 2 --batch 1 --seq 64 --warmup 0 --steps 1"
  torch_args="$torch_args --attention matmul"  # the CPU's torch may predate SDPA
  parity_args="--gemmax-backend cuda_emulated --preset base"
  gmm_model="model_name=gemma4-tiny base_num_decoder_layers=1 per_device_batch_size=1"
  gmm_model="$gmm_model max_target_length=64 dtype=bfloat16"
  attn_model="model_name=gemma4-tiny per_device_batch_size=1 max_target_length=64 dtype=bfloat16"
else
  model="model_name=gemma4-26b-a4b base_num_decoder_layers=6 per_device_batch_size=2"
  model="$model max_target_length=16384 remat_policy=full dtype=bfloat16 num_vocab_tiling=16"
  steps="--warmup 1 --steps 3"
  torch_args="--device cuda --model gemma4-26b-a4b --layers 6 --batch 2 --seq 16384"
  torch_args="$torch_args --warmup 1 --steps 3"
  parity_args="--gemmax-backend cuda"
  gmm_model="model_name=gemma4-26b-a4b base_num_decoder_layers=1 per_device_batch_size=2"
  gmm_model="$gmm_model max_target_length=16384 remat_policy=full dtype=bfloat16 num_vocab_tiling=16"
  attn_model="model_name=gemma4-26b-a4b per_device_batch_size=2 max_target_length=16384"
  attn_model="$attn_model dtype=bfloat16"
fi
reserve=0
if wanted 3; then
  stage gemmax_bench 240 "$gemmax" bench backend=$backend $model $steps \
    --json "$out/gemmax_bench.json"
  tail -25 "$out/gemmax_bench.log" > "$out/gemmax_bench.tail.txt"
  # Attention alone on each path, same run. cudnn in a build without cuDNN's frontend is said,
  # not counted a failure; the emulator cannot run cuDNN's kernels.
  for path in mma sm90 cudnn; do
    if [ $dry -eq 1 ] && [ $path = cudnn ]; then
      skip attention_cudnn "cuda_emulated cannot run cuDNN's kernels"
      continue
    fi
    before=$status
    stage "attention_$path" 45 "$gemmax" bench backend=$backend $attn_model \
      cuda_attention=$path --attention --json "$out/attention_$path.json"
    if grep -q "this build has no cuDNN frontend" "$out/attention_$path.log" 2> /dev/null; then
      status=$before
      note "attention_$path: this build has no cuDNN frontend (not counted)"
      continue
    fi
    grep -A4 "^attention at the model" "$out/attention_$path.log" | tail -n +2 |
      sed "s/^/cuda_attention=$path: /" | tee -a "$out/summary.txt"
  done
  # CUTLASS's grouped GEMM beside both own paths and the dense rate, in one process (when
  # bench/build_gpu_prebuilt.sh could build it): checked against the mma kernel on odd and empty
  # groups first. It times the same products as the two runs below, which it then replaces.
  if [ $dry -eq 1 ]; then
    skip gmm_cutlass "library kernels cannot run on cuda_emulated"
  elif cutlass_bench=$(find_bin gmm_cutlass); then
    stage gmm_cutlass_tests 40 "$cutlass_bench" --test --gtest_output="xml:$out/gmm_cutlass_tests.xml"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran" "$out/gmm_cutlass_tests.log" |
      sed "s/^/cutlass: /" | tee -a "$out/summary.txt"
    # A failed run (CUTLASS disagreeing, a fault) leaves the own paths' figures to the runs below.
    stage gmm_cutlass 150 "$cutlass_bench" $gmm_model || cutlass_bench=""
    sed -n '/^check:/,$p' "$out/gmm_cutlass.log" | sed "s/^/cutlass: /" | tee -a "$out/summary.txt"
  else
    skip gmm_cutlass "no gmm_cutlass under $prebuilt (built without CUTLASS's headers)"
    cutlass_bench=""
  fi
  if [ -z "${cutlass_bench:-}" ]; then
    for path in mma sm90; do
      stage "gmm_$path" 90 "$gemmax" bench backend=$backend $gmm_model cuda_gmm=$path \
        --warmup 0 --steps 1 --json "$out/gmm_$path.json"
      grep -A6 "^grouped matmul vs dense" "$out/gmm_$path.log" | sed "s/^/cuda_gmm=$path: /" |
        tee -a "$out/summary.txt"
    done
  fi
fi

# ---- 4, 5: the PyTorch baseline and the float32 parity ----------------------------------------
if wanted 4 || wanted 5; then
  if ! "$python" -c "import torch" > /dev/null 2>&1; then
    wanted 4 && skip pytorch_baseline "no python3 with torch on this machine"
    wanted 5 && skip parity "no python3 with torch on this machine"
  else
    wanted 4 && stage pytorch_baseline 240 "$python" "$here/bench/pytorch_baseline.py" \
      $torch_args --json "$out/pytorch_baseline.json"
    wanted 5 && stage parity 150 "$python" "$here/tests/reference/parity.py" \
      --gemmax "$gemmax" $parity_args
  fi
fi

# ---- 6: FSDP over NCCL on every GPU of the machine ----------------------------------------------
if wanted 6; then
  gpus=$( (nvidia-smi -L 2> /dev/null || true) | grep -c '^GPU')
  if [ $dry -eq 1 ]; then
    skip fsdp "a dry run has no GPUs: mpirun -np N gemmax train backend=cuda is not rehearsed"
  elif [ "$gpus" -lt 2 ]; then
    skip fsdp "$gpus GPU on this machine"
  elif ! command -v mpirun > /dev/null; then
    skip fsdp "no mpirun on this machine"
  elif [ ! -f "$(dirname "$gemmax")/libgemmax_mpi.so" ]; then
    skip fsdp "this gemmax has no MPI (bench/build_gpu_prebuilt.sh leaves it out): build one here"
  else
    stage fsdp 150 mpirun --allow-run-as-root -np "$gpus" "$gemmax" train backend=cuda \
      model_name=gemma4-small dataset_type=synthetic steps=5 "base_output_directory=$work/fsdp"
  fi
fi

# ---- summary ---------------------------------------------------------------------------------
python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
g, t = load("gemmax_bench.json"), load("pytorch_baseline.json")
s = {}
if g:
    peak = 989.0  # H100/H200 SXM dense bf16 TFLOP/s
    s.update(backend=g["backend"], step_seconds=g["step_seconds_median"],
             tokens_per_sec=g["tokens_per_sec"], model_tflops_per_sec=g["model_tflops_per_sec"],
             mfu_vs_989=g["model_tflops_per_sec"] / peak,
             dense_bf16_tflops_per_sec=g["dense_bf16_tflops_per_sec"],
             mfu_vs_dense=g["model_over_dense"], time_by_family=g.get("time_by_family"),
             grouped_vs_dense=g.get("grouped_vs_dense"))
    # The seed's workload per device: 30 layers (25 sliding + 5 global), same batch. The head
    # does not scale with layers; the optimizer scales with the parameters (25.23B for 30
    # layers, 5.64B for 6: the embedding's 0.74B plus 0.816B a layer); the rest by 30 / 6.
    fam = g.get("time_by_family") or {}
    sec = lambda k: (fam.get(k) or {}).get("seconds", 0.0)
    head, opt = sec("head and loss"), sec("optimizer")
    layers = g["step_seconds_median"] - head - opt
    s["step_seconds_30_layers_estimate"] = head + opt * 25.23 / 5.64 + layers * 5
    print("30 layers (estimate, one device, no FSDP traffic): %.2f s/step (seed: 3.82 s on "
          "TPU v6e)" % s["step_seconds_30_layers_estimate"])
    print("gemmax   %.3f s/step, %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%% of 989, %.1f%% of the"
          " measured dense bf16 rate (%.0f TFLOP/s)" % (
              s["step_seconds"], s["tokens_per_sec"], s["model_tflops_per_sec"],
              100 * s["mfu_vs_989"], 100 * s["mfu_vs_dense"], s["dense_bf16_tflops_per_sec"]))
if t:
    s["pytorch_tokens_per_sec"] = t["tokens_per_sec"]
    print("pytorch  %.0f tokens/s" % t["tokens_per_sec"])
    if g:
        s["ratio_to_pytorch"] = g["tokens_per_sec"] / t["tokens_per_sec"]
        print("ratio    %.2fx" % s["ratio_to_pytorch"])
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=2)
PY
note "done in $(($(date +%s) - start)) s, status $status"
exit $status

#!/bin/bash
# The cuda backend's check on a bare GPU machine, in one go (under 8 minutes on one H200): build,
# the GPU tests, the benchmark of gemma4-26b-a4b (6 layers) against the PyTorch baseline on the
# same GPU, and the float32 parity with the PyTorch reference. Everything it prints and writes
# goes to OUT; OUT/summary.txt and OUT/summary.json hold the figures of docs/PERFORMANCE.md.
#
#   bench/gpu_check.sh [OUT] [DEPS]
#
# OUT defaults to $OUT, else gpu_check_out. Needs nvcc (CUDA 12.4 or newer), CMake >= 3.22, a
# C++20 compiler, and python3 with torch. DEPS (default bench/gpu_deps, if present) holds the
# Debian packages of the build's libraries, fetched beforehand by bench/fetch_gpu_deps.sh; they
# are unpacked there with dpkg -x and used ahead of the machine's own. Every stage runs even if
# an earlier one failed (the build excepted), each under a time limit that keeps the total within
# the budget (GPU_CHECK_SECONDS, default 460).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-gpu_check_out}}
deps=${2:-${GEMMAX_GPU_DEPS:-$here/bench/gpu_deps}}
budget=${GPU_CHECK_SECONDS:-460}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
start=$(date +%s)
status=0
note() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$out/summary.txt"; }
left() { echo $((budget - ($(date +%s) - start))); }
# Runs a stage with at most min(limit, time left - reserve) seconds; logs to OUT/name.log.
stage() {
  local name=$1 limit=$2 reserve=$3
  shift 3
  local t=$(($(left) - reserve))
  [ "$t" -gt "$limit" ] && t=$limit
  if [ "$t" -lt 10 ]; then
    note "$name: skipped (out of time)"
    status=1
    return 1
  fi
  note "$name: running (limit ${t} s)"
  timeout --kill-after=10 "$t" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then note "$name: ok"; else note "$name: FAILED (exit $rc, $name.log)"; status=1; fi
  return $rc
}
: > "$out/summary.txt"
note "gemmax gpu check in $here, output in $out"
{
  nvidia-smi || true
  nvcc --version || true
  cmake --version | head -1
  c++ --version | head -1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" || true
  git -C "$here" log -1 --format='commit %H %s' 2>/dev/null || true
} > "$out/machine.txt" 2>&1

# ---- the libraries of the build, from the carried Debian packages --------------------------
if [ -d "$deps" ] && ls "$deps"/*.deb > /dev/null 2>&1; then
  prefix=$work/deps
  mkdir -p "$prefix"
  for deb in "$deps"/*.deb; do
    if command -v dpkg-deb > /dev/null; then
      dpkg-deb -x "$deb" "$prefix"
    else  # no dpkg: the .deb is an ar archive holding data.tar.*
      python3 - "$deb" "$prefix" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
at = 8
while at < len(data):
    name, size = data[at:at + 16].decode().strip(), int(data[at + 48:at + 58])
    body = data[at + 60:at + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2])
    at += 60 + size + (size & 1)
PY
    fi
  done
  arch=$(ls "$prefix/usr/lib" | grep -m1 -- '-linux-gnu' || echo x86_64-linux-gnu)
  lib=$prefix/usr/lib/$arch
  export CMAKE_PREFIX_PATH="$prefix/usr:$lib/cmake${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CMAKE_LIBRARY_PATH="$lib"
  export CMAKE_INCLUDE_PATH="$prefix/usr/include"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$PATH:$prefix/usr/bin"  # the machine's own tools first; protoc, pkgconf if absent
  export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$prefix/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$prefix"
  command -v pkg-config > /dev/null || ln -sf pkgconf "$prefix/usr/bin/pkg-config"
  note "libraries: $(ls "$deps"/*.deb | wc -l) Debian packages unpacked from $deps"
else
  note "libraries: the machine's own (no Debian packages in $deps)"
fi

# ---- build: Release, Hopper machine code only -------------------------------------------------
build=$work/build
if ! stage configure 120 300 cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DGEMMAX_CUDA=ON "-DGEMMAX_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a"; then
  tail -30 "$out/configure.log"
  exit 1
fi
if ! stage build 330 130 cmake --build "$build" -j "$(nproc)" --target gemmax gemmax_tests; then
  grep -m 20 -B2 -A6 -E "error|Error" "$out/build.log"
  exit 1
fi
gemmax=$build/bin/gemmax

# ---- the GPU tests: every cuda op against the reference, the model, resume, memory plan ---------
# The plain kernels first, in their own process: a fault in a tensor-core kernel (which ends the
# process's CUDA context) then cannot hide their results.
for kind in gpu_simple gpu; do
  stage "tests_$kind" 90 100 "$build/tests/gemmax_tests" --gtest_filter="*/$kind" \
    --gtest_output="xml:$out/tests_$kind.xml"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran" "$out/tests_$kind.log" | tee -a "$out/summary.txt"
done

# ---- the benchmark, then the PyTorch baseline on the same GPU ---------------------------------
model="model_name=gemma4-26b-a4b base_num_decoder_layers=6 per_device_batch_size=2"
model="$model max_target_length=16384 remat_policy=full dtype=bfloat16 num_vocab_tiling=16"
stage gemmax_bench 160 70 "$gemmax" bench backend=cuda $model --warmup 1 --steps 3 \
  --json "$out/gemmax_bench.json"
stage pytorch_baseline 120 10 python3 "$here/bench/pytorch_baseline.py" --device cuda \
  --model gemma4-26b-a4b --layers 6 --batch 2 --seq 16384 --warmup 1 --steps 3 \
  --json "$out/pytorch_baseline.json"

# ---- float32 parity of the cuda backend with the PyTorch reference ----------------------------
stage parity_cuda 60 0 python3 "$here/tests/reference/parity.py" --gemmax "$gemmax" \
  --gemmax-backend cuda

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
rm -rf "$work"
exit $status

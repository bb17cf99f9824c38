#!/bin/bash
# The shipped folder (scripts/package.sh) on a machine without CUDA: a mount namespace hides
# every folder that holds a CUDA library (tmpfs over each); there gemmax starts, trains a
# backend=cpu step, and says, for backend=cuda, which library its module lacks. Outside, with
# the libraries in place, the same folder loads its module.
#
#   tests/tools/package/hidden_cuda_test.sh BUILD WORK
set -eu
here=$(cd "$(dirname "$0")/../../.." && pwd)
build=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
"$here/scripts/package.sh" "$build" "$work/pkg" > /dev/null
gemmax=$work/pkg/bin/gemmax
fail() { echo "FAILED: $*" >&2; exit 1; }

# The folders of the CUDA libraries the module needs (and any other copies the loader knows).
cuda_dirs=$( (
  [ -f "$work/pkg/bin/libgemmax_cuda.so" ] &&
    ldd "$work/pkg/bin/libgemmax_cuda.so" | awk '$3 ~ /^\// {print $3}'
  ldconfig -p | awk '{print $NF}'
) | grep -E '/lib(cuda|cudart|cublas|cublasLt|cudnn|nvrtc|nccl)[^/]*\.so' | xargs -r -n1 dirname |
  sort -u)
if ! unshare -m true 2> /dev/null; then
  echo "skipped: no mount namespace here (unshare -m needs root)"
  exit 0
fi
cat > "$work/inside.sh" << INSIDE
set -eu
for d in $(echo $cuda_dirs); do mount -t tmpfs none "\$d"; done
# Nothing of CUDA is left to load.
if ldconfig -p | awk '{print \$NF}' | xargs -r ls 2> /dev/null | grep -q -E 'libcu(dart|blasLt)'; then
  echo "a CUDA library is still visible"; exit 1
fi
"$gemmax" --help > /dev/null
"$gemmax" train base_output_directory="$work/runs" run_name=cpu backend=cpu steps=1 \
  base_emb_dim=32 max_target_length=16 per_device_batch_size=1 sample_max_new_tokens=0 \
  eval_interval=-1 > "$work/cpu.txt" 2>&1
"$gemmax" info --backends > "$work/backends_hidden.txt" 2>&1
set +e
"$gemmax" train base_output_directory="$work/runs" run_name=gpu backend=cuda steps=1 \
  > "$work/cuda.txt" 2>&1
echo \$? > "$work/cuda.rc"
INSIDE
unshare -m bash "$work/inside.sh" || fail "inside the namespace: $(cat "$work"/*.txt 2> /dev/null)"
grep -q "step 0" "$work/cpu.txt" 2> /dev/null || grep -q "loss" "$work/cpu.txt" ||
  fail "no training step on the cpu: $(cat "$work/cpu.txt")"
[ -d "$work/runs/cpu/checkpoints" ] || fail "the cpu run left no checkpoint: $(cat "$work/cpu.txt")"
[ "$(cat "$work/cuda.rc")" = 1 ] || fail "backend=cuda exited $(cat "$work/cuda.rc"): $(cat "$work/cuda.txt")"
[ ! -e "$work/runs/gpu" ] || fail "the refused cuda run wrote $work/runs/gpu"
if [ -f "$work/pkg/bin/libgemmax_cuda.so" ]; then
  grep -q "it needs libcu.*which the loader cannot find" "$work/cuda.txt" ||
    fail "the cuda error does not name the missing library: $(cat "$work/cuda.txt")"
  # With the libraries in place, the same folder loads its module.
  "$gemmax" info --backends | grep -q "^cuda: *module $work/pkg/bin/libgemmax_cuda.so" ||
    fail "the packaged module does not load: $("$gemmax" info --backends)"
else
  grep -q "built without CUDA" "$work/cuda.txt" || fail "$(cat "$work/cuda.txt")"
fi
echo "passed: the packaged gemmax trains on the cpu with every CUDA library hidden, and names the one its module lacks"

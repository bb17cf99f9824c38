#!/usr/bin/env bash
# Registers and spills per thread of the cuda backend's kernels, as ptxas reports them for
# sm_90a (the build's own flags; no GPU needed):
#
#   bench/cuda_registers.sh [FILTER] [FILE.cu ...]   # compiles the files (default: every cuda_*.cu)
#   bench/cuda_registers.sh --log BUILD_LOG [FILTER] # reads the output of a build configured with
#                                                    # -DCMAKE_CUDA_FLAGS=-Xptxas=-v instead
#
# FILTER (a grep -E pattern, default: every kernel) selects kernels by their demangled name. One
# line per kernel: registers, spill stores / loads in bytes, static shared memory, then the
# kernel's functor and template arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
log=
if [ "${1:-}" = --log ]; then
  log=$2
  shift 2
fi
filter=${1:-.}
shift || true

ptxas_report() {
  if [ -n "$log" ]; then
    cat "$log"
    return
  fi
  local files=("$@")
  [ ${#files[@]} -gt 0 ] || files=(src/gemmax/backend/cuda/cuda_*.cu)
  local nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  [ -d build/generated ] || { echo "cuda_registers.sh: run cmake first (build/generated is missing)" >&2; exit 1; }
  for f in "${files[@]}"; do
    "$nvcc" -O3 -DNDEBUG -DGEMMAX_WITH_CUDA -std=c++20 --expt-relaxed-constexpr \
      -gencode=arch=compute_90a,code=sm_90a -Isrc -Ibuild/generated -Xptxas -v -c "$f" \
      -o /dev/null 2>&1
  done
}

ptxas_report "$@" | awk '
  function num(line, pattern,   s) {  # the number in front of `pattern`
    if (!match(line, "[0-9]+ " pattern)) return 0
    s = substr(line, RSTART, RLENGTH); sub(/ .*/, "", s); return s
  }
  /Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2) }
  /bytes spill stores/ { st = num($0, "bytes spill stores"); ld = num($0, "bytes spill loads") }
  /Used [0-9]+ registers/ && name != "" {
    print name "\t" num($0, "registers") "\t" st "\t" ld "\t" num($0, "bytes smem")
    name = ""
  }' | while IFS=$'\t' read -r name regs st ld smem; do
  printf '%4s regs  %4s/%-4s spill  %6s smem  %s\n' "$regs" "$st" "$ld" "$smem" \
    "$(c++filt <<<"$name" | sed -E 's/^void gemmax::cuda::[a-z_]+<//; s/gemmax::(kern::)?//g; s/>\([^()]*\)$//')"
done | grep -E -- "$filter" || true

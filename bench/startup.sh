#!/bin/bash
# Start-up cost of gemmax binaries, side by side in one run:
#
#   bench/startup.sh [RUNS] BINARY [BINARY ...]      (default RUNS 20)
#
# For `--help`, `info` and `train dry_run=true` (gemma4-tiny): the whole process's wall time
# (median and best of RUNS; an upper bound of the time to main), its peak resident memory, and
# the dynamic loader's own share (LD_DEBUG=statistics, in cycles). Then what a singleton
# MPI_Init costs on this machine (bench/mpi_singleton_init.cc, when mpicxx exists), which a
# one-process run no longer pays. Each binary runs with its own folder's modules; the page cache
# is warmed by one run first.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
runs=20
if [[ ${1:-} =~ ^[0-9]+$ ]]; then runs=$1; shift; fi
[ $# -ge 1 ] || { echo "usage: bench/startup.sh [RUNS] BINARY [BINARY ...]" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
     "flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "date: $(date -u +%F), runs: $runs"
# One command, `runs` times: "median_ms best_ms max_rss_mib".
measure() {
  "$@" > /dev/null 2>&1 || { echo "failed: $*" >&2; return 1; }
  local times=() rss=0
  for ((i = 0; i < runs; i++)); do
    local t0 t1
    t0=$(date +%s%N)
    /usr/bin/time -f %M -o "$tmp/rss" "$@" > /dev/null 2>&1
    t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000)))
    local r
    r=$(tail -1 "$tmp/rss")
    ((r > rss)) && rss=$r
  done
  local sorted
  sorted=($(printf '%s\n' "${times[@]}" | sort -n))
  awk -v m="${sorted[$((runs / 2))]}" -v b="${sorted[0]}" -v r="$rss" \
    'BEGIN { printf "%9.1f %7.1f %8.1f", m / 1000, b / 1000, r / 1024 }'
}
printf '%-34s %-24s %9s %7s %8s %14s\n' binary command "median ms" "best ms" "RSS MiB" "loader cycles"
for bin in "$@"; do
  for cmd in "--help" "info" "train dry_run=true"; do
    # shellcheck disable=SC2086
    figures=$(measure "$bin" $cmd)
    # shellcheck disable=SC2086
    loader=$(LD_DEBUG=statistics "$bin" $cmd 2>&1 > /dev/null |
      sed -n 's/.*total startup time in dynamic loader: \([0-9]*\) cycles.*/\1/p' | head -1)
    printf '%-34s %-24s %s %14s\n' "$bin" "$cmd" "$figures" "${loader:-?}"
  done
  if ldd "$bin" > /dev/null 2>&1; then
    echo "  needs: $(ldd "$bin" | awk '{print $1}' | grep -v -E '^(linux-vdso|/lib64)' | tr '\n' ' ')"
  else
    echo "  needs: nothing (static)"
  fi
done
if command -v mpicxx > /dev/null; then
  mpicxx -O2 "$here/bench/mpi_singleton_init.cc" -o "$tmp/mpi_singleton_init"
  for ((i = 0; i < 3; i++)); do echo "singleton $("$tmp/mpi_singleton_init")"; done
fi

#!/bin/sh
# Runs bench/kernel_families (the cpu kernel families side by side at a model's shapes: small or
# e2b) at the highest priority it may, on 1 and 2 threads:
#   ./bench/run_kernel_families.sh [build] [rounds] [shapes]
set -e
build=${1:-build}
rounds=${2:-3}
shapes=${3:-small}
for threads in 1 2; do
  nice -n -20 "$build/bin/kernel_families" "$threads" "$rounds" "$shapes" 2>/dev/null ||
    "$build/bin/kernel_families" "$threads" "$rounds" "$shapes"
  echo
done

#!/bin/sh
# Runs bench/kernel_families (the cpu kernel families side by side at gemma4-small's shapes) at
# the highest priority it may, on 1 and 2 threads: ./bench/run_kernel_families.sh [build] [rounds]
set -e
build=${1:-build}
rounds=${2:-3}
for threads in 1 2; do
  nice -n -20 "$build/bin/kernel_families" "$threads" "$rounds" 2>/dev/null ||
    "$build/bin/kernel_families" "$threads" "$rounds"
  echo
done

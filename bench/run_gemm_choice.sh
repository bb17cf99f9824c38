#!/bin/sh
# Runs bench/gemm_choice (gemmax's kernel families against oneDNN and libxsmm, each library
# limited to the family's ISA class) for every family this CPU runs, 2 threads, at the highest
# priority, so that other work on a shared machine disturbs it as little as possible:
#   ./bench/run_gemm_choice.sh [build] [families...]   (default: avx512_bf16 avx512_fp32 avx2)
set -e
build=${1:-build}
[ $# -gt 0 ] && shift
families=${*:-avx512_bf16 avx512_fp32 avx2}
for family in $families; do
  nice -n -20 "$build/bin/gemm_choice" 2 "$family" 2>/dev/null ||
    "$build/bin/gemm_choice" 2 "$family"
  echo
done

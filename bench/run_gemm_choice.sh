#!/bin/sh
# Runs bench/gemm_choice (gemmax's kernel families against oneDNN and libxsmm, each library
# limited to the family's ISA class) for every family listed, at the highest priority, so that
# other work on a shared machine disturbs it as little as possible:
#   ./bench/run_gemm_choice.sh [build] [threads] [families...]
# (defaults: build, 2 threads, avx512_bf16 avx512_fp32 avx2)
set -e
build=${1:-build}
threads=${2:-2}
[ $# -gt 2 ] && shift 2 || shift $#
families=${*:-avx512_bf16 avx512_fp32 avx2}
for family in $families; do
  nice -n -20 "$build/bin/gemm_choice" "$threads" "$family" 2>/dev/null ||
    "$build/bin/gemm_choice" "$threads" "$family"
  echo
done

#!/bin/sh
# Runs bench/gemm_choice (gemmax's product engine vs oneDNN) at the highest priority, so that
# other work on a shared machine disturbs it as little as possible: ./bench/run_gemm_choice.sh [build]
set -e
build=${1:-build}
nice -n -20 "$build/bin/gemm_choice" 2 2>/dev/null || "$build/bin/gemm_choice" 2

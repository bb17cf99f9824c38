#!/bin/bash
# Reading a Hugging Face dataset: `gemmax tokenize` over the same rows as JSONL, as Parquet and as
# the Arrow IPC file of datasets.save_to_disk, in one run (tokens/s of the whole command, byte
# tokenizer, so that reading shows), then the start-up cost of the Arrow module: a tiny JSONL
# input (the module is not loaded) against the same rows as Parquet (it is).
#
#   bench/hf_read.sh [BUILD] [MIB]      (default build, 64 MiB of text)
#
# The inputs are written by Python's pyarrow (a venv outside the repository):
#   python3 -m venv VENV && VENV/bin/pip install pyarrow==18.1.0 datasets; PYTHON=VENV/bin/python
# PYTHON names another interpreter with pyarrow and datasets.
set -eu
build=${1:-build}
mib=${2:-64}
py=${PYTHON:-python3}
export HF_DATASETS_DISABLE_PROGRESS_BARS=1
bin=$build/bin/gemmax
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
     "flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "date: $(date -u +%F), $mib MiB of text"
"$py" - "$tmp" "$mib" <<'PY'
import json, os, random, sys
import datasets, pyarrow as pa, pyarrow.parquet as pq
out, mib = sys.argv[1], int(sys.argv[2])
rng = random.Random(0)
words = [w for w in "the of and to in is was for on that with as by at from it an be this are or "
         "which his her had not but they have one all were we their has been more when there".split()]
rows, size = [], 0
while size < mib << 20:
    t = " ".join(rng.choice(words) for _ in range(rng.randint(20, 400))) + "."
    rows.append({"text": t})
    size += len(t)
with open(os.path.join(out, "big.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
table = pa.Table.from_pylist(rows)
pq.write_table(table, os.path.join(out, "big.parquet"))  # pyarrow's defaults: snappy, 1 Mi rows a group
datasets.Dataset(table).save_to_disk(os.path.join(out, "saved"))
with open(os.path.join(out, "tiny.jsonl"), "w") as f:
    f.write(json.dumps(rows[0]) + "\n")
pq.write_table(pa.Table.from_pylist(rows[:1]), os.path.join(out, "tiny.parquet"))
PY
run() {  # prints seconds and the tokens the command wrote
  local t0 t1
  t0=$(date +%s%N)
  local line
  line=$("$bin" tokenize --out "$tmp/out.bin" "$@" 2>/dev/null | head -1)
  t1=$(date +%s%N)
  local tokens
  tokens=$(echo "$line" | sed -n 's/.*documents*, \([0-9]*\) tokens.*/\1/p')
  awk -v ns=$((t1 - t0)) -v tok="$tokens" 'BEGIN { printf "%8.3f s %12d tokens %8.2f Mtok/s", ns / 1e9, tok, tok / (ns / 1e9) / 1e6 }'
}
printf '%-26s %s\n' "input" "tokenize (byte tokenizer)"
for i in 1 2; do  # the second pass reads from the page cache
  printf '%-26s %s\n' "JSONL ($i)" "$(run "$tmp/big.jsonl")"
  printf '%-26s %s\n' "Parquet ($i)" "$(run --data_columns text "$tmp/big.parquet")"
  printf '%-26s %s\n' "Arrow, save_to_disk ($i)" "$(run --hf_path "$tmp/saved")"
done
ls -l "$tmp/big.jsonl" "$tmp/big.parquet" | awk '{printf "  %s: %.1f MiB\n", $NF, $5 / 1048576}'
# Start-up: the median of 20 runs of one tiny input each.
startup() {
  local times=()
  for ((i = 0; i < 20; i++)); do
    local t0 t1
    t0=$(date +%s%N)
    "$bin" tokenize --out "$tmp/tiny.bin" "$@" > /dev/null 2>&1
    t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR] = $1} END {printf "%.1f ms median, %.1f ms best", a[int(NR / 2) + 1] / 1000, a[1] / 1000}'
}
echo "start-up, one row: JSONL (no Arrow module) $(startup "$tmp/tiny.jsonl")"
echo "start-up, one row: Parquet (loads libgemmax_arrow.so) $(startup --data_columns text "$tmp/tiny.parquet")"
echo "gemmax-engine links Arrow: $(ldd "$build/bin/gemmax-engine" | grep -c -E 'arrow|parquet' || true) libraries"

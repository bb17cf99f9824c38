#!/usr/bin/env bash
# gemmax beside MaxText, step for step: both train the same tiny Gemma-4 MoE (gemmax's
# gemma4-tiny: 6 layers, width 128, 8 experts top-2) with the same vocabulary of 1024
# SentencePiece pieces, on the same corpus, batch (8 x 256 tokens), schedule (learning rate 3e-3,
# 10% warm-up, cosine to 10%) and AdamW, from each system's own initialisation, for two seeds in
# fp32 and in bf16. Prints the mean loss per window of steps for both and the bf16 gaps.
# gemmax reads the data as MaxText's grain pipeline does (--packing first_fit, the default:
# documents shuffled in windows of 100 with data_shuffle_seed, truncated to a row, packed first-fit
# into the 8 rows of a batch), and the script first checks that both systems' first batches hold
# the same rows; --packing sequential gives gemmax its own in-order packing instead. gemmax trains
# the embedding in MaxText's units (embedding_table=maxtext, docs/TRAINING.md §12); --embedding_table
# hf gives it Hugging Face's table instead. Runs are named gemmax_mtable_* and gemmax_* (HF's table,
# as before the switch existed) so that a DIR from an earlier version is not mistaken for either.
# MaxText runs Gemma-4's partial RoPE only under a gemma4 model_name: the script passes
# model_name=gemma4-26b with every model key overridden (runs maxtext_g4rope_*); --maxtext_rope
# generic gives the generic partial RoPE of model_name=default (runs maxtext_*, as before).
# Not part of CI: it installs MaxText and JAX (CPU) from PyPI into VENV (a few GB), and MaxText
# runs its steps on the CPU (tens of minutes on 2 cores).
#
#   tests/reference/maxtext_curve_check.sh --venv VENV [--gemmax build/bin/gemmax] [--out DIR]
#       [--steps 300] [--seeds "0 1"] [--dtypes "float32 bfloat16"] [--windows "100:120 280:300"]
#       [--corpus FILE.jsonl] [--vocab 1024] [--only gemmax|maxtext]
#       [--packing first_fit|sequential] [--embedding_table maxtext|hf] [--check_batches 20]
#       [--gemmax_args "num_threads=1 ..."] [--maxtext_rope gemma4|generic]
#
# VENV is created with the first python3.12 or newer found (MaxText 0.2.5 requires 3.12) when it
# does not exist. The corpus defaults to the docstrings of Python's standard library (English
# prose, about 5 MB), written as JSONL; MaxText reads it as parquet through its grain pipeline,
# gemmax through `gemmax tokenize`, both with the same SentencePiece model trained on it. Runs
# that finished are kept in DIR: running again with the same DIR only runs what is missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv="" gemmax=build/bin/gemmax out=/tmp/gemmax_maxtext_curves steps=300 seeds="0 1"
dtypes="float32 bfloat16" windows="100:120 280:300" corpus="" vocab=1024 only=""
packing=first_fit check_batches=20 gemmax_args="" embedding_table=maxtext maxtext_rope=gemma4
while (($#)); do
  case $1 in
    --venv) venv=$2; shift 2 ;;
    --gemmax) gemmax=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --windows) windows=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --packing) packing=$2; shift 2 ;;
    --embedding_table) embedding_table=$2; shift 2 ;;
    --check_batches) check_batches=$2; shift 2 ;;
    --gemmax_args) gemmax_args=$2; shift 2 ;;
    --maxtext_rope) maxtext_rope=$2; shift 2 ;;
    *) echo "maxtext_curve_check.sh: unknown argument '$1' (see the header for usage)" >&2; exit 2 ;;
  esac
done
[[ -n $venv ]] || { echo "maxtext_curve_check.sh: --venv VENV is required (created if missing)" >&2; exit 2; }
[[ $packing == first_fit || $packing == sequential ]] ||
  { echo "maxtext_curve_check.sh: --packing is first_fit or sequential, got '$packing'" >&2; exit 2; }
[[ $embedding_table == maxtext || $embedding_table == hf ]] ||
  { echo "maxtext_curve_check.sh: --embedding_table is maxtext or hf, got '$embedding_table'" >&2; exit 2; }
[[ $maxtext_rope == gemma4 || $maxtext_rope == generic ]] ||
  { echo "maxtext_curve_check.sh: --maxtext_rope is gemma4 or generic, got '$maxtext_rope'" >&2; exit 2; }
[[ -x $gemmax ]] || { echo "maxtext_curve_check.sh: no gemmax binary at '$gemmax' (--gemmax PATH)" >&2; exit 2; }
gemmax=$(realpath "$gemmax")
mkdir -p "$out"
out=$(realpath "$out")

if [[ ! -x $venv/bin/python ]]; then
  py=""
  for c in python3.13 python3.12 "$HOME"/.pyenv/versions/3.1[23]*/bin/python3; do
    if command -v "$c" > /dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2> /dev/null; then
      py=$c; break
    fi
  done
  [[ -n $py ]] || { echo "maxtext_curve_check.sh: MaxText 0.2.5 needs Python 3.12 or newer; none found" >&2; exit 1; }
  "$py" -m venv "$venv"
  "$venv/bin/pip" install --quiet "maxtext[tpu]==0.2.5" "jax[cpu]"
fi
python=$venv/bin/python
export JAX_PLATFORMS=cpu

# The data: one corpus, one tokenizer, for both systems.
if [[ ! -s $out/spm.model || ! -s $out/corpus.bin ]]; then
  if [[ -z $corpus ]]; then corpus=$out/corpus.jsonl; "$python" "$here/maxtext_curve_check.py" corpus "$corpus"; fi
  "$python" "$here/maxtext_curve_check.py" prepare "$out" "$corpus" "$vocab"
  "$gemmax" tokenize --out "$out/corpus.bin" --tokenizer sentencepiece --tokenizer_path "$out/spm.model" "$corpus"
fi
"$python" "$here/maxtext_curve_check.py" maxtext_config "$out" "$vocab"

common_gemmax=(model_name=gemma4-tiny vocab_size="$vocab" dataset_type=shards dataset_path="$out/corpus.bin"
  tokenizer_type=sentencepiece tokenizer_path="$out/spm.model" per_device_batch_size=8
  max_target_length=256 steps="$steps" learning_rate=3e-3 warmup_steps_fraction=0.1
  enable_checkpointing=false sample_max_new_tokens=0 base_output_directory="$out"
  embedding_table="$embedding_table")
gemmax_runs=gemmax
[[ $embedding_table == hf ]] || gemmax_runs=gemmax_mtable
if [[ $packing == first_fit ]]; then  # MaxText's grain pipeline, with MaxText's defaults
  common_gemmax+=(grain_packing_type=first_fit enable_data_shuffling=true
    grain_shuffle_buffer_size=100 use_truncation=true)
else
  gemmax_runs=${gemmax_runs/gemmax/gemmax_sequential}
fi
# MaxText builds Gemma-4's partial RoPE only under a model_name starting with gemma4
# (maxtext_same_weights.py model_args): every model key on the command line under gemma4-26b.
# --maxtext_rope generic gives the runs before this (model_name=default), named maxtext_*.
maxtext_model=() maxtext_runs=maxtext
if [[ $maxtext_rope == gemma4 ]]; then
  mapfile -t maxtext_model < <("$python" "$here/maxtext_same_weights.py" model_args "$out/gemma4_tiny.yml")
  maxtext_runs=maxtext_g4rope
fi
common_maxtext=(hardware=cpu skip_jax_distributed_system=true per_device_batch_size=8
  max_target_length=256 steps="$steps" learning_rate=3e-3 warmup_steps_fraction=0.1
  learning_rate_final_fraction=0.1 dataset_type=grain grain_file_type=parquet
  grain_train_files="$out/corpus.parquet" grain_worker_count=1 tokenizer_type=sentencepiece
  tokenizer_path="$out/spm.model" packing=true enable_checkpointing=false enable_tensorboard=false
  num_epoch=100 weight_dtype=float32 attention=dot_product megablox=false sparse_matmul=true
  base_output_directory="$out/maxtext_out")

# Both pipelines' first batches, row for row (MaxText's side through its own pipeline functions).
if [[ $packing == first_fit && $check_batches -gt 0 ]]; then
  for seed in $seeds; do
    "$gemmax" info --batches "$check_batches" "${common_gemmax[@]}" data_shuffle_seed="$seed" \
      > "$out/gemmax_batches_s$seed.jsonl" 2> /dev/null
    "$python" "$here/maxtext_curve_check.py" rows "$out" "$seed" "$check_batches" \
      "$out/gemmax_batches_s$seed.jsonl" || echo "the pipelines' rows differ (seed $seed)" >&2
  done
fi

for dtype in $dtypes; do
  for seed in $seeds; do
    run=${gemmax_runs}_${dtype}_s${seed}
    if [[ $only != maxtext && ! -s $out/$run/metrics.jsonl ]]; then
      echo "== $run"
      "$gemmax" train "${common_gemmax[@]}" run_name="$run" dtype="$dtype" init_weights_seed="$seed" \
        data_shuffle_seed="$seed" $gemmax_args > "$out/$run.log" 2>&1 || { echo "failed: see $out/$run.log" >&2; exit 1; }
    fi
    run=${maxtext_runs}_${dtype}_s${seed}
    done_steps=0
    [[ -f $out/$run/metrics.txt ]] && done_steps=$(wc -l < "$out/$run/metrics.txt")
    if [[ $only != gemmax && $done_steps -lt $steps ]]; then
      echo "== $run"
      mkdir -p "$out/$run"
      "$python" -m maxtext.trainers.pre_train.train "$out/gemma4_tiny.yml" "${maxtext_model[@]}" "${common_maxtext[@]}" \
        run_name="$run" dtype="$dtype" init_weights_seed="$seed" data_shuffle_seed="$seed" \
        metrics_file="$out/$run/metrics.txt" > "$out/$run.log" 2>&1 \
        || { echo "failed: see $out/$run.log" >&2; exit 1; }
    fi
  done
done

echo "== $(date -u '+%F %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
"$python" "$here/maxtext_curve_check.py" report "$out" "$steps" "$seeds" "$dtypes" "$windows" \
  "$gemmax_runs" "$maxtext_runs"

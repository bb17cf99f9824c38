#!/usr/bin/env bash
# One training step from identical weights in MaxText and gemmax: MaxText initialises the curve
# check's model (maxtext_curve_check.sh: gemmax's gemma4-tiny structure, 1024 SentencePiece pieces)
# as its trainer does, the weights are converted to a Hugging Face Gemma-4 folder, and
#   1. both systems' loss and every gradient on the same unpacked rows, from those weights:
#      MaxText's by jax.grad of its own loss_fn, gemmax's by `gemmax grad` (reference backend,
#      fp32 and fp64; the load-balance weight as MaxText's and halved, which undoes MaxText's
#      division of the expert density by num_experts_per_tok); again with every expert selected
#      (top-k = 8 of 8: no discrete routing decision left to flip on a near-tie), with MaxText's
#      tied head multiplying by the fp32 table (it uses a bf16 copy in every dtype), and both;
#   2. STEPS training steps of both from those weights on the same packed rows (MaxText's grain
#      pipeline, gemmax's first-fit reading of it), per dtype: loss, lm loss, load-balance loss
#      and raw gradient norm per step, and their relative differences; then the same in fp32
#      with every expert selected (unless --no_all_experts_steps).
# MaxText runs the model under model_name=gemma4-26b with every model key overridden
# (maxtext_same_weights.py model_args): MaxText builds Gemma-4's partial RoPE only then.
# Not part of CI: needs the MaxText venv of maxtext_curve_check.sh (created there when missing).
#
#   tests/reference/maxtext_same_weights.sh --venv VENV [--gemmax build/bin/gemmax] [--out DIR]
#       [--data DIR] [--steps 5] [--seed 0] [--dtypes "float32 bfloat16"] [--vocab 1024]
#       [--gemmax_args "num_threads=1 ..."] [--no_all_experts_steps]
#
# --data: a folder prepared by maxtext_curve_check.sh (corpus.parquet, corpus.bin, spm.model),
# read only; without it the data is prepared in DIR the same way. The schedule is the curve
# check's (300 steps: learning_rate_schedule_steps=300 in both), so STEPS are its first steps.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv="" gemmax=build/bin/gemmax out=/tmp/gemmax_maxtext_same data="" steps=5 seed=0
dtypes="float32 bfloat16" vocab=1024 gemmax_args="" all_experts_steps=1
while (($#)); do
  case $1 in
    --venv) venv=$2; shift 2 ;;
    --gemmax) gemmax=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --gemmax_args) gemmax_args=$2; shift 2 ;;
    --no_all_experts_steps) all_experts_steps=0; shift ;;
    *) echo "maxtext_same_weights.sh: unknown argument '$1' (see the header for usage)" >&2; exit 2 ;;
  esac
done
[[ -n $venv ]] || { echo "maxtext_same_weights.sh: --venv VENV is required (maxtext_curve_check.sh creates one)" >&2; exit 2; }
[[ -x $venv/bin/python ]] || { echo "maxtext_same_weights.sh: no Python at '$venv/bin/python'; create the venv with maxtext_curve_check.sh --venv $venv" >&2; exit 2; }
[[ -x $gemmax ]] || { echo "maxtext_same_weights.sh: no gemmax binary at '$gemmax' (--gemmax PATH)" >&2; exit 2; }
gemmax=$(realpath "$gemmax")
mkdir -p "$out"
out=$(realpath "$out")
python=$venv/bin/python
export JAX_PLATFORMS=cpu
py() { "$python" "$here/maxtext_same_weights.py" "$@"; }

# The data: the curve check's corpus and tokenizer.
if [[ -z $data ]]; then
  data=$out
  if [[ ! -s $data/spm.model || ! -s $data/corpus.bin ]]; then
    "$python" "$here/maxtext_curve_check.py" corpus "$data/corpus.jsonl"
    "$python" "$here/maxtext_curve_check.py" prepare "$data" "$data/corpus.jsonl" "$vocab"
    "$gemmax" tokenize --out "$data/corpus.bin" --tokenizer sentencepiece \
      --tokenizer_path "$data/spm.model" "$data/corpus.jsonl"
  fi
fi
for f in corpus.parquet corpus.bin spm.model; do
  [[ -s $data/$f ]] || { echo "maxtext_same_weights.sh: '$data/$f' is missing (--data DIR from maxtext_curve_check.sh)" >&2; exit 2; }
done
data=$(realpath "$data")
"$python" "$here/maxtext_curve_check.py" maxtext_config "$out" "$vocab"
mapfile -t model_args < <(py model_args "$out/gemma4_tiny.yml")
base_yml=$("$python" -c 'import maxtext, os; print(os.path.join(os.path.dirname(maxtext.__file__), "configs", "base.yml"))')

common_maxtext=("$base_yml" "${model_args[@]}" hardware=cpu skip_jax_distributed_system=true
  per_device_batch_size=8 max_target_length=256 steps="$steps" learning_rate_schedule_steps=300
  learning_rate=3e-3 warmup_steps_fraction=0.1 learning_rate_final_fraction=0.1 dataset_type=grain
  grain_file_type=parquet grain_train_files="$data/corpus.parquet" grain_worker_count=1
  tokenizer_type=sentencepiece tokenizer_path="$data/spm.model" packing=true
  enable_checkpointing=false enable_tensorboard=false num_epoch=100 weight_dtype=float32
  attention=dot_product megablox=false sparse_matmul=true base_output_directory="$out/maxtext_out"
  init_weights_seed="$seed" data_shuffle_seed="$seed")
common_gemmax=(model_name=gemma4-tiny vocab_size="$vocab" dataset_type=shards
  dataset_path="$data/corpus.bin" tokenizer_type=sentencepiece tokenizer_path="$data/spm.model"
  per_device_batch_size=8 max_target_length=256 steps="$steps" learning_rate_schedule_steps=300
  learning_rate=3e-3 warmup_steps_fraction=0.1 enable_checkpointing=false
  sample_max_new_tokens=0 base_output_directory="$out" embedding_table=maxtext
  grain_packing_type=first_fit enable_data_shuffling=true grain_shuffle_buffer_size=100
  use_truncation=true data_shuffle_seed="$seed" load_parameters_path="$out/hf")

# 1. MaxText's initial weights as an HF folder; both systems' loss and gradients on them.
if [[ ! -s $out/maxtext_loss.json ]]; then
  echo "== MaxText's initial weights, seed $seed"
  py init "$out" "$data" "$seed" "${common_maxtext[@]}" run_name=same_weights_init dtype=float32 \
    > "$out/init.log" 2>&1 || { echo "failed: see $out/init.log" >&2; exit 1; }
fi
grep '^MaxText' "$out/init.log"
for run in "float32 0.001" "float32 0.0005" "float64 0.0005"; do
  set -- $run
  tag=gemmax_grad_$1_w$2
  if [[ ! -s $out/$tag.safetensors ]]; then
    "$gemmax" grad --model "$out/hf" --tokens "$out/tokens.bin" --batch 8 --dtype "$1" \
      --backend reference --load_balance_loss_weight "$2" --out "$out/$tag.safetensors" \
      --logits "$out/${tag}_logits.safetensors" \
      > "$out/$tag.json" 2> "$out/$tag.log" || { echo "failed: see $out/$tag.log" >&2; exit 1; }
  fi
  echo
  py compare "$out" "$out/$tag.json" "$out/$tag.safetensors" \
    "gemmax grad ($1, load_balance_loss_weight $2)"
done

# 1b. Attribution, each in its own folder under DIR: every expert selected (all_experts:
# num_experts_per_tok = num_experts, so the routing holds no discrete choice and no near-tie can
# send a token to other experts under the systems' different roundings); MaxText's tied head with
# the fp32 table where MaxText multiplies by its bf16 copy (fp32_head); both. gemmax's
# load-balance weight is 0.001 divided by num_experts_per_tok, MaxText's division of the density.
all_experts=$out/all_experts
for variant in "all_experts 8 init" "fp32_head 2 init_fp32_head" "all_experts_fp32_head 8 init_fp32_head"; do
  set -- $variant
  dir=$out/$1 k=$2
  w=$("$python" -c "print(0.001 / $k)")
  mkdir -p "$dir"
  if [[ ! -s $dir/maxtext_loss.json ]]; then
    echo "== MaxText's initial weights, seed $seed: $1"
    mapfile -t variant_args < <(py model_args "$out/gemma4_tiny.yml" num_experts_per_tok="$k")
    py "$3" "$dir" "$data" "$seed" "$base_yml" "${variant_args[@]}" \
      "${common_maxtext[@]:$((1 + ${#model_args[@]}))}" run_name="same_weights_$1" dtype=float32 \
      > "$dir/init.log" 2>&1 || { echo "failed: see $dir/init.log" >&2; exit 1; }
  fi
  for dt in float32 float64; do
    tag=gemmax_grad_$dt
    if [[ ! -s $dir/$tag.safetensors ]]; then
      "$gemmax" grad --model "$dir/hf" --tokens "$dir/tokens.bin" --batch 8 --dtype "$dt" \
        --backend reference --load_balance_loss_weight "$w" --out "$dir/$tag.safetensors" \
        --logits "$dir/${tag}_logits.safetensors" > "$dir/$tag.json" 2> "$dir/$tag.log" \
        || { echo "failed: see $dir/$tag.log" >&2; exit 1; }
    fi
    echo
    py compare "$dir" "$dir/$tag.json" "$dir/$tag.safetensors" \
      "$1: gemmax grad ($dt, load_balance_loss_weight $w)"
  done
done

# 2. STEPS training steps of both from those weights.
for dtype in $dtypes; do
  run=gemmax_$dtype
  if [[ ! -s $out/$run/metrics.jsonl ]]; then
    echo "== $run"
    "$gemmax" train "${common_gemmax[@]}" run_name="$run" dtype="$dtype" $gemmax_args \
      > "$out/$run.log" 2>&1 || { echo "failed: see $out/$run.log" >&2; exit 1; }
  fi
  run=maxtext_$dtype
  done_steps=0
  [[ -f $out/$run/metrics.txt ]] && done_steps=$(wc -l < "$out/$run/metrics.txt")
  if [[ $done_steps -lt $steps ]]; then
    echo "== $run"
    mkdir -p "$out/$run"
    rm -f "$out/$run/metrics.txt"
    "$python" -m maxtext.trainers.pre_train.train "${common_maxtext[@]}" run_name="$run" \
      dtype="$dtype" metrics_file="$out/$run/metrics.txt" > "$out/$run.log" 2>&1 \
      || { echo "failed: see $out/$run.log" >&2; exit 1; }
  fi
done

# 2b. The same steps in fp32 with every expert selected: the update without routing decisions.
if [[ $all_experts_steps == 1 ]]; then
  run=gemmax_float32
  if [[ ! -s $all_experts/$run/metrics.jsonl ]]; then
    echo "== every expert selected: $run"
    "$gemmax" train "${common_gemmax[@]}" base_output_directory="$all_experts" \
      load_parameters_path="$all_experts/hf" num_experts_per_tok=8 load_balance_loss_weight=0.000125 \
      run_name="$run" dtype=float32 $gemmax_args > "$all_experts/$run.log" 2>&1 \
      || { echo "failed: see $all_experts/$run.log" >&2; exit 1; }
  fi
  run=maxtext_float32
  done_steps=0
  [[ -f $all_experts/$run/metrics.txt ]] && done_steps=$(wc -l < "$all_experts/$run/metrics.txt")
  if [[ $done_steps -lt $steps ]]; then
    echo "== every expert selected: $run"
    mkdir -p "$all_experts/$run"
    rm -f "$all_experts/$run/metrics.txt"
    mapfile -t model_args_all < <(py model_args "$out/gemma4_tiny.yml" num_experts_per_tok=8)
    "$python" -m maxtext.trainers.pre_train.train "$base_yml" "${model_args_all[@]}" \
      "${common_maxtext[@]:$((1 + ${#model_args[@]}))}" run_name="all_experts_$run" dtype=float32 \
      metrics_file="$all_experts/$run/metrics.txt" > "$all_experts/$run.log" 2>&1 \
      || { echo "failed: see $all_experts/$run.log" >&2; exit 1; }
  fi
fi

echo
echo "== $(date -u '+%F %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
py report "$out" "$steps" "$dtypes"
if [[ $all_experts_steps == 1 ]]; then
  echo "every expert selected (num_experts_per_tok=8; gemmax load_balance_loss_weight=0.000125):"
  py report "$all_experts" "$steps" float32
fi

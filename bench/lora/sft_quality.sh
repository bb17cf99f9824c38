#!/usr/bin/env bash
# LoRA SFT quality against Hugging Face PEFT (docs/PERFORMANCE.md, "LoRA and QLoRA"): the same
# trained base, data, rank, alpha, targets, learning rate, steps and batches, fine-tuned by gemmax
# and by PEFT (bench/lora/peft_sft_quality.py); their held-out losses side by side.
#   1. a base: gemma4-tiny's structure at width WIDTH, dense (num_experts=1, so that the two sides
#      train the same graph: PEFT's loss has no load-balance term), pre-trained by gemmax on its
#      built-in corpus for BASE_STEPS steps and exported (fp32);
#   2. the task: numbers spelt out in words (make_sft_task.py), prompt-completion pairs tokenized
#      by `gemmax tokenize` (byte tokenizer), the loss on the completions;
#   3. LoRA r RANK, alpha 2 RANK on q/k/v/o and gate/up/down, fp32, STEPS steps of BATCH rows of
#      SEQ tokens in file order (grain_packing_type=sequential), gemmax's AdamW and schedule;
#      evaluated on the whole held-out set.
#
#   4. SEEDS seeds of the adapters' initialisation: PEFT draws them, and gemmax starts from PEFT's
#      draw (lora_restore_path), so the two runs differ only in their arithmetic.
#
#   bench/lora/sft_quality.sh [--width 128] [--base-steps 400] [--steps 300] [--rank 8]
#                             [--lr 3e-3] [--batch 8] [--seq 64] [--seeds 3]
#                             [--gemmax build/bin/gemmax]
set -euo pipefail

width=128 base_steps=400 steps=300 rank=8 lr=3e-3 batch=8 seq=64 seeds=3 gemmax=build/bin/gemmax
venv="${VENV:-${TMPDIR:-/tmp}/gemmax-hf-venv}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --width) width=$2; shift 2 ;;
    --base-steps) base_steps=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rank) rank=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --gemmax) gemmax=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    *) echo "sft_quality.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/gemmax-sft-quality.XXXXXX")"
trap 'rm -rf "$work"' EXIT
shape=(base_emb_dim="$width" num_experts=1 dtype=float32 weight_dtype=float32)

"$gemmax" train run_name=base base_output_directory="$work" "${shape[@]}" steps="$base_steps" \
    per_device_batch_size=8 max_target_length=128 learning_rate=3e-3 eval_interval=-1 \
    sample_max_new_tokens=0 > "$work/base.log" 2>&1
"$gemmax" export --dtype float32 --checkpoint "$work/base" --out "$work/base_hf" > /dev/null
python3 "$here/make_sft_task.py" --out "$work/task"
for part in train eval; do
  "$gemmax" tokenize --out "$work/$part.bin" "$work/task/$part.jsonl" > /dev/null
done

# The targets (q/k/v/o, gate/up/down, PEFT's peer's) come with the adapter gemmax starts from.
lora=(enable_lora=true lora_rank="$rank" lora_alpha=$((2 * rank)))
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%F)"
echo "# base: width $width, $base_steps steps; LoRA r $rank, alpha $((2 * rank)), lr $lr, $steps x $batch x $seq"
for ((seed = 0; seed < seeds; ++seed)); do
  "$venv/bin/python" "$here/peft_sft_quality.py" --model "$work/base_hf" --seed "$seed" \
      --save-initial-adapter "$work/init$seed" --train "$work/train.bin" --eval "$work/eval.bin" \
      --rank "$rank" --alpha $((2 * rank)) --lr "$lr" --steps "$steps" --batch "$batch" \
      --seq "$seq" --completion-only --packing sequential 2>/dev/null | tail -1 > "$work/peft$seed.json"
  "$gemmax" train run_name=sft$seed base_output_directory="$work" "${shape[@]}" "${lora[@]}" \
      lora_restore_path="$work/init$seed" load_parameters_path="$work/base_hf" \
      dataset_type=shards dataset_path="$work/train.bin" eval_dataset_path="$work/eval.bin" \
      sft_train_on_completion_only=true grain_packing_type=sequential enable_data_shuffling=false \
      steps="$steps" learning_rate="$lr" per_device_batch_size="$batch" max_target_length="$seq" \
      eval_interval="$steps" eval_steps=-1 sample_max_new_tokens=0 > "$work/sft$seed.log" 2>&1
  python3 -c 'import json,sys
m = [json.loads(l) for l in open(sys.argv[1]) if "eval/avg_loss" in l][-1]
p = json.load(open(sys.argv[2]))
print(json.dumps({"seed": int(sys.argv[3]), "gemmax_eval_loss": m["eval/avg_loss"],
                  "peft_eval_loss": p["eval_loss"], "eval_targets": [int(m["eval/total_weights"]),
                  p["eval_targets"]], "gemmax_over_peft": m["eval/avg_loss"] / p["eval_loss"]}))' \
      "$work/sft$seed/metrics.jsonl" "$work/peft$seed.json" "$seed"
done

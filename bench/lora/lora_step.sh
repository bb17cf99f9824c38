#!/usr/bin/env bash
# gemmax's LoRA training step against Hugging Face PEFT's on the same cores (docs/PERFORMANCE.md,
# "LoRA and QLoRA"): a gemma4-e2b-shaped model at its true widths with a few layers, LoRA r 16,
# alpha 32 on q/k/v/o and gate/up/down, batch 1 x SEQ tokens of random data, AdamW on the
# adapters. One run after the other on an otherwise idle machine:
#   - gemmax: the LoRA step (remat_policy full, gemmax's default, and none), the QLoRA step, and
#     the full fine-tune step of the same model (every weight trained) for comparison;
#   - the peer (bench/lora/peft_step.py): the best of fp32 and bf16 autocast, eager and
#     torch.compile.
# Prints each figure (tokens/s: batch x seq over the mean step after the first) and the ratios.
#
#   bench/lora/lora_step.sh [--layers 4] [--seq 2048] [--steps 4] [--threads N]
#                           [--gemmax build/bin/gemmax] [--venv DIR] [--no-peer] [--no-full]
#                           [--peer-modes bf16_compile,...]
# --no-full: no full fine-tune on either side (at 20 layers its fp32 weights, gradients and
# moments need about 40 GB). --peer-modes: only these of the peer's modes (its best has been
# bf16_compile in every run: a quicker comparison).
# VENV (default ${TMPDIR:-/tmp}/gemmax-hf-venv) needs torch, transformers >= 5.5 and peft.
set -euo pipefail

layers=4 seq=2048 steps=4 threads=$(nproc) gemmax=build/bin/gemmax peer=1 full=1 peer_modes=""
venv="${VENV:-${TMPDIR:-/tmp}/gemmax-hf-venv}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --layers) layers=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --gemmax) gemmax=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    --no-peer) peer=0; shift ;;
    --no-full) full=0; shift ;;
    --peer-modes) peer_modes=$2; shift 2 ;;
    *) echo "lora_step.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work="$(mktemp -d "${TMPDIR:-/tmp}/gemmax-lora-step.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The peer's layer pattern: e2b's 4 sliding + 1 global, the last layer global.
types=""
for ((l = 0; l < layers; ++l)); do
  if ((l == layers - 1 || l % 5 == 4)); then t=full_attention; else t=sliding_attention; fi
  types+="${types:+,}$t"
done
shared=0
if ((layers >= 10)); then shared=$((layers / 2)); fi  # the peer's rule, as e2b shares 20 of 35

common=(model_name=gemma4-e2b base_num_decoder_layers="$layers" layer_types="$types"
        num_kv_shared_layers="$shared" dataset_type=synthetic max_target_length="$seq"
        per_device_batch_size=1 steps="$steps" learning_rate=1e-4 log_period=1000
        enable_checkpointing=false eval_interval=-1 sample_max_new_tokens=0
        num_threads="$threads" base_output_directory="$work")
lora=(enable_lora=true lora_rank=16 lora_alpha=32
      lora_target_modules=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)

tokens_per_sec() {  # the "done:" line's tokens/s
  sed -n 's/.*s | \([0-9.e+]*\) tokens\/s.*/\1/p' "$1" | tail -1
}
run() {  # name, keys...
  local name=$1; shift
  "$gemmax" train run_name="$name" "${common[@]}" "$@" > "$work/$name.log" 2>&1 ||
    { echo "gemmax $name failed:"; tail -20 "$work/$name.log"; exit 1; }
  echo "{\"engine\": \"gemmax\", \"mode\": \"$name\", \"tokens_per_sec\": $(tokens_per_sec "$work/$name.log")}"
}

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $threads threads, $(date -u +%F)"
echo "# gemma4-e2b widths, $layers layers ($types, $shared shared), batch 1 x $seq, LoRA r 16"
run lora_remat_full "${lora[@]}" remat_policy=full
run lora_remat_none "${lora[@]}" remat_policy=none
run qlora_remat_none "${lora[@]}" remat_policy=none lora_weight_qtype=nf4
if ((full)); then run full_finetune_remat_none remat_policy=none; fi
if ((peer)); then
  peer_args=()
  if ((!full)); then peer_args=(--no-full); fi
  if [[ -n $peer_modes ]]; then peer_args+=(--modes "$peer_modes"); fi
  OMP_NUM_THREADS=$threads "$venv/bin/python" "$(dirname "$0")/peft_step.py" --layers "$layers" \
      --seq "$seq" --threads "$threads" --steps "$steps" --json "$work/peer.json" "${peer_args[@]}" 2>/dev/null |
    grep '^{'
fi

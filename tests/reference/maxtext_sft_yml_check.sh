#!/usr/bin/env bash
# Runs MaxText's own SFT recipe file, configs/post_train/sft.yml as the maxtext package ships it
# (its base_config: "base.yml" beside it), with gemmax (outside CI: it takes the file from the
# maxtext wheel). Only what a CPU run needs is added on the command line: the model and its
# sizes, steps, hf_path at a local copy of a chat dataset and tokenizer_path at a Gemma-4-style
# model folder with tokenizer.json and chat_template.jinja (the tests' fixtures). It runs the
# recipe as it is (a full SFT), then with MaxText's dotted LoRA keys, then QLoRA.
#
#   tests/reference/maxtext_sft_yml_check.sh --gemmax build/bin/gemmax [--maxtext DIR]
#
# DIR: an unpacked maxtext package (holding configs/post_train/sft.yml); without it the wheel
# (MAXTEXT_VERSION, default 0.2.5) is fetched with `pip download --no-deps` and unpacked.
# Exits non-zero if a run fails or leaves no checkpoint, metrics or adapter.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
version="${MAXTEXT_VERSION:-0.2.5}"
gemmax="" maxtext=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gemmax) gemmax="$2"; shift 2 ;;
    --maxtext) maxtext="$2"; shift 2 ;;
    *) echo "maxtext_sft_yml_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$gemmax" || ! -x "$gemmax" ]]; then
  echo "maxtext_sft_yml_check: give the gemmax binary: --gemmax build/bin/gemmax" >&2
  exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ -z "$maxtext" ]]; then
  python3 -m pip download --quiet --no-deps "maxtext==$version" -d "$work/wheel"
  python3 -m zipfile -e "$work"/wheel/maxtext-*.whl "$work/wheel/x"
  maxtext="$work/wheel/x/maxtext"
fi
sft="$maxtext/configs/post_train/sft.yml"
[[ -f "$sft" ]] || { echo "maxtext_sft_yml_check: no $sft" >&2; exit 2; }

D="$repo/tests/data/fixtures" W="$work/runs"
# A base model over the fixture tokenizer's vocabulary, as an HF folder with the release's files.
"$gemmax" train model_name=gemma4-tiny vocab_size=768 tokenizer_path="$D/tokenizer_json/gemma" \
  dataset_type=hf hf_path="$D/hf/text" steps=10 per_device_batch_size=4 max_target_length=128 \
  base_output_directory="$W" run_name=base sample_max_new_tokens=0 >"$work/base.log" 2>&1
"$gemmax" export --checkpoint "$W/base" --out "$W/base_hf" >/dev/null
cp "$D/tokenizer_json/gemma/tokenizer.json" "$D/tokenizer_json/gemma/tokenizer_config.json" "$W/base_hf/"
cp "$repo/fuzz/corpus/chat_template_fuzz/gemma4.jinja" "$W/base_hf/chat_template.jinja"

common=(model_name=gemma4-tiny vocab_size=768 load_parameters_path="$W/base_hf"
        tokenizer_path="$W/base_hf" hf_path="$D/hf/chat" steps=3 per_device_batch_size=1
        eval_per_device_batch_size=1 max_target_length=32 base_output_directory="$W")
failed=0
check() {  # name, extra keys...
  local name="$1"; shift
  if ! "$gemmax" train "$sft" "${common[@]}" run_name="$name" "$@" >"$work/$name.log" 2>&1; then
    echo "FAIL $name: exit non-zero"; tail -5 "$work/$name.log"; failed=1; return
  fi
  local steps
  steps=$(grep -c '"step"' "$W/$name/metrics.jsonl" || true)
  if [[ ! -d "$W/$name/checkpoints" || "$steps" -lt 3 ]]; then
    echo "FAIL $name: no checkpoint or fewer than 3 steps in metrics.jsonl"; failed=1; return
  fi
  echo "ok   $name: $(grep -o 'loss [0-9.]* -> [0-9.]*' "$work/$name.log" | tail -1)"
}
check sft
check lora lora.enable_lora=true lora.lora_rank=4 lora.lora_alpha=8
[[ -f "$W/lora/adapter/adapter_config.json" ]] || { echo "FAIL lora: no PEFT adapter folder"; failed=1; }
check qlora lora.enable_lora=true lora.lora_rank=4 lora.lora_alpha=8 lora.lora_weight_qtype=nf4 \
  lora.lora_tile_size=16
grep -h "MaxText keys" "$work/sft.log" | cut -c1-160
exit "$failed"

#!/usr/bin/env bash
# Reads gemmax's TensorBoard event files with the `tensorboard` package itself and compares
# every step with metrics.jsonl.
#
#   tests/reference/tensorboard_check.sh --gemmax build/bin/gemmax [--venv DIR] [--no-server]
#
# Trains a small run, loses its last checkpoint and resumes it (so that the run's events span
# two files and the resumed run redoes two steps), then runs tensorboard_compare.py in a virtual
# environment outside the source tree, created once with the `tensorboard` package from PyPI.
# It reads the run with TensorBoard's Python event readers and, unless --no-server, with the
# TensorBoard server (its Rust data server, as `tensorboard --logdir` does by default).
# Environment:
#   GEMMAX_TB_VENV   venv folder, also --venv (default: ${TMPDIR:-/tmp}/gemmax-tb-venv)
#   PYTHON           interpreter for a new venv (default: /usr/bin/python3, else python3)
# Exits non-zero if tensorboard cannot be installed or any comparison fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${GEMMAX_TB_VENV:-${TMPDIR:-/tmp}/gemmax-tb-venv}"
gemmax=""
compare_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gemmax) gemmax="$2"; shift 2 ;;
    --venv) venv="$2"; shift 2 ;;
    --no-server) compare_args+=(--no-server); shift ;;
    *) echo "tensorboard_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$gemmax" || ! -x "$gemmax" ]]; then
  echo "tensorboard_check: give the gemmax binary: --gemmax build/bin/gemmax" >&2
  exit 2
fi
gemmax="$(cd "$(dirname "$gemmax")" && pwd)/$(basename "$gemmax")"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x /usr/bin/python3 ]]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi

have_tensorboard() {
  [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import tensorboard" >/dev/null 2>&1
}
if ! have_tensorboard; then
  echo "tensorboard_check: installing tensorboard into $venv" >&2
  if ! "$PYTHON" -m venv "$venv"; then
    echo "tensorboard_check: cannot create a virtual environment with $PYTHON" >&2
    exit 2
  fi
  if ! "$venv/bin/pip" install --quiet tensorboard; then
    echo "tensorboard_check: pip could not install tensorboard" >&2
    exit 2
  fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/gemmax-tb-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
args=(base_output_directory="$work" run_name=run base_emb_dim=64 max_target_length=64
      per_device_batch_size=2 learning_rate_schedule_steps=8 checkpoint_period=2
      sample_max_new_tokens=0 log_period=1000)
echo "tensorboard_check: training 4 steps, then resuming from step 2 to step 6" >&2
"$gemmax" train "${args[@]}" steps=4 >"$work/train1.log"
rm -rf "$work/run/checkpoints/step_00000004"
"$gemmax" train "${args[@]}" steps=6 >"$work/train2.log"
grep -q "resumed from .*step_00000002" "$work/train2.log" || {
  echo "tensorboard_check: the second run did not resume from step 2" >&2
  exit 1
}
"$venv/bin/python" -c "import tensorboard; print('tensorboard_check: tensorboard',
  tensorboard.__version__)"
"$venv/bin/python" "$here/tensorboard_compare.py" --run "$work/run" --steps 6 \
  ${compare_args[@]+"${compare_args[@]}"}

#!/usr/bin/env bash
# Compares Hugging Face transformers' Gemma-4 with the reference (and gemmax) on the presets.
#
#   tests/reference/hf_parity.sh [--gemmax PATH] [--preset NAME ...]
#
# Creates (once) a virtual environment outside the source tree with transformers (Gemma-4
# support: >= 5.5.0) and torch from PyPI, then runs hf_compare.py in it; the arguments are
# passed on. Environment:
#   GEMMAX_HF_VENV   venv folder (default: ${TMPDIR:-/tmp}/gemmax-hf-venv)
#   GEMMAX_HF_PIP    what to install (default: "transformers>=5.5.0 torch numpy")
#   PYTHON           interpreter for the venv (default: /usr/bin/python3, else python3)
# The torch wheel with its CUDA libraries is several GB; the venv is reused on later runs.
# Exits non-zero if the packages cannot be installed or any comparison fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${GEMMAX_HF_VENV:-${TMPDIR:-/tmp}/gemmax-hf-venv}"
pip_spec="${GEMMAX_HF_PIP:-transformers>=5.5.0 torch numpy}"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x /usr/bin/python3 ]]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi

have_gemma4() {
  [[ -x "$venv/bin/python" ]] &&
    "$venv/bin/python" -c "import torch, numpy, transformers.models.gemma4.modeling_gemma4" \
      >/dev/null 2>&1
}

if ! have_gemma4; then
  echo "hf_parity: installing $pip_spec into $venv" >&2
  if ! "$PYTHON" -m venv "$venv"; then
    echo "hf_parity: cannot create a virtual environment with $PYTHON (python3-venv missing?)" >&2
    exit 2
  fi
  # shellcheck disable=SC2086  # pip_spec is a list of requirement words
  if ! "$venv/bin/pip" install --quiet $pip_spec; then
    echo "hf_parity: pip could not install: $pip_spec" >&2
    exit 2
  fi
  if ! have_gemma4; then
    echo "hf_parity: installed transformers has no Gemma-4 (needs >= 5.5.0):" \
      "$("$venv/bin/python" -c 'import transformers; print(transformers.__version__)' 2>&1)" >&2
    exit 2
  fi
fi
"$venv/bin/python" -c "import torch, transformers; print('hf_parity: transformers',
  transformers.__version__, 'torch', torch.__version__)"
exec "$venv/bin/python" "$here/hf_compare.py" "$@"

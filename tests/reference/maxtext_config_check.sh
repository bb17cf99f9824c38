#!/usr/bin/env bash
# Runs gemmax on MaxText's own config files and compares the model it reads with MaxText's
# parse of the same files (outside CI: it installs MaxText from PyPI).
#
#   tests/reference/maxtext_config_check.sh --gemmax build/bin/gemmax [--venv DIR]
#
# The virtual environment (default: ${TMPDIR:-/tmp}/gemmax-maxtext-venv, created once with
# Python 3.12, which MaxText requires) gets `maxtext` and the packages its config parser
# imports: MaxText's wheel declares its dependencies only under extras (tpu, cuda12), far more
# than parsing a config needs. Then maxtext_config_check.py does the comparison.
# Environment:
#   GEMMAX_MAXTEXT_VENV  venv folder, also --venv
#   MAXTEXT_VERSION      the MaxText release (default 0.2.5)
#   PYTHON               interpreter for a new venv (default: python3.12)
# Exits non-zero if MaxText cannot be installed or any check fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${GEMMAX_MAXTEXT_VENV:-${TMPDIR:-/tmp}/gemmax-maxtext-venv}"
version="${MAXTEXT_VERSION:-0.2.5}"
gemmax=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gemmax) gemmax="$2"; shift 2 ;;
    --venv) venv="$2"; shift 2 ;;
    *) echo "maxtext_config_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$gemmax" || ! -x "$gemmax" ]]; then
  echo "maxtext_config_check: give the gemmax binary: --gemmax build/bin/gemmax" >&2
  exit 2
fi
gemmax="$(cd "$(dirname "$gemmax")" && pwd)/$(basename "$gemmax")"

parser_imports() {
  [[ -x "$venv/bin/python" ]] &&
    "$venv/bin/python" -c "from maxtext.configs import pyconfig" >/dev/null 2>&1
}
if ! parser_imports; then
  echo "maxtext_config_check: installing maxtext==$version into $venv" >&2
  if [[ ! -x "$venv/bin/python" ]] && ! "${PYTHON:-python3.12}" -m venv "$venv"; then
    echo "maxtext_config_check: cannot create a Python 3.12 venv (set PYTHON)" >&2
    exit 2
  fi
  if ! "$venv/bin/pip" install --quiet "maxtext==$version" jax flax omegaconf pydantic \
      packaging pathwaysutils jinja2; then
    echo "maxtext_config_check: pip could not install maxtext==$version" >&2
    exit 2
  fi
  if ! parser_imports; then
    echo "maxtext_config_check: MaxText's config parser does not import in $venv:" >&2
    "$venv/bin/python" -c "from maxtext.configs import pyconfig" >&2 || true
    exit 2
  fi
fi
# MaxText's parser logs through absl and JAX on stderr; the comparison is on stdout.
exec "$venv/bin/python" "$here/maxtext_config_check.py" --gemmax "$gemmax" 2> >(grep -v "^[IWE][0-9]\{4\} \|^WARNING:absl" >&2)

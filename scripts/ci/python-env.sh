#!/usr/bin/env bash
# Prints the interpreter of this clone's Python environment (made by
# scripts/ci/setup-python.sh), e.g.  "$(scripts/ci/python-env.sh)" -m lora_trainer --help
# Exits 1 with the reason on stderr when it is missing or broken.
set -euo pipefail
py="$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python"
if [ ! -x "$py" ]; then
  echo "python-env.sh: $py is missing; run scripts/ci/setup-python.sh" >&2
  exit 1
fi
if ! "$py" -c 'import lora_trainer, torch' 2>/dev/null; then
  echo "python-env.sh: $py cannot import lora_trainer and torch; run scripts/ci/setup-python.sh" >&2
  exit 1
fi
echo "$py"

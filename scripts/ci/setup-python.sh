#!/usr/bin/env bash
# The project's Python environment, for the reference LoRA trainer
# (scripts/lora_trainer: its tests, the hf backend, TRL parity, gpu_check.py).
#
# Two layers, so that every clone on a machine shares the big download but
# runs its own code:
#  1. the dependencies: scripts/lora_trainer/requirements.lock (exact
#     versions) installed once into a virtual environment at a stable path
#     outside the repository, keyed by a hash of the lock file and the base
#     interpreter: ${HIMES_VENV:-$HOME/.cache/himes/venv-<hash>}. A later run
#     (another clone, CI in a fresh folder) finds it complete and reuses it.
#  2. this clone: .venv/ in the repository root (git-ignored), a venv without
#     pip whose site-packages reads layer 1 (a .pth file) and holds the
#     trainer package installed editable (pip install -e scripts/lora_trainer).
#     Editable into the shared layer instead would point every clone at the
#     last one that ran this script.
# scripts/ci/python-env.sh prints .venv's interpreter.
#
# torch: PyPI serves only the CUDA build for Linux x86_64 (torch 2.15.0: a
# 539 MB wheel that needs 14 nvidia-* / cuda-* wheels); the CPU-only index is
# not reachable from the project's machines. `--no-deps` torch without them
# does not import: libtorch.so links libtorch_cuda.so, which links cudart,
# cublas, cudnn, cusparse, cufft, nccl, nvshmem, ... (readelf -d), so the
# nvidia wheels are required even on a CPU. What CI pays the first time on
# a machine, measured on the 2-core dev machine shared with other jobs:
#   download 2.7 GB (66 wheels: torch 0.54 GB, nvidia-* 2.1 GB), 8 min at
#   load average 28 (pip download alone);
#   install 4.9 GB on disk: 28 min at load 25-37, 11.6 min at load 23 (with
#   triton, since left out; see requirements.lock);
#   later runs: 30 s (layer 1 found complete; the time is importing torch
#   for the check), a fresh clone 90 s (layer 2).
#
# Idempotent: a complete layer 1 (marker file written last) is not touched;
# an interrupted one is removed and rebuilt. Concurrent runs serialize on a
# lock file. Usage: bash scripts/ci/setup-python.sh  (prints the paths)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
lock="scripts/lora_trainer/requirements.lock"
base=${HIMES_PYTHON:-python3}
if ! command -v "$base" >/dev/null; then
  echo "setup-python.sh: no $base on PATH (set HIMES_PYTHON to a Python >= 3.10)" >&2
  exit 1
fi
base=$(command -v "$base")
pyver=$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if ! "$base" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "setup-python.sh: $base is Python $pyver; the trainer needs >= 3.10 (set HIMES_PYTHON)" >&2
  exit 1
fi
# The hash covers what the environment is built from: the lock, the
# interpreter (version and path: a venv links its interpreter) and the machine.
key=$( (cat "$lock"; "$base" -c 'import sys, platform; print(sys.version, sys.executable, platform.machine())') |
  sha256sum | cut -c1-16)
deps=${HIMES_VENV:-$HOME/.cache/himes/venv-$key}
marker="$deps/.himes-complete"

mkdir -p "$(dirname "$deps")"
exec 9>"$deps.lock"
flock 9
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$key" ]; then
  echo "setup-python.sh: dependencies already installed in $deps"
else
  rm -rf "$deps"
  echo "setup-python.sh: installing $lock into $deps (2.7 GB download, 4.9 GB installed; 10-30 minutes)"
  start=$(date +%s)
  "$base" -m venv "$deps"
  # --no-deps: the lock is the whole environment, resolved once (pip install
  # --dry-run --report on the unpinned names); nothing else is pulled in.
  "$deps/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$lock"
  "$deps/bin/python" -c 'import torch, transformers, peft, trl, tokenizers, safetensors, pytest, numpy
x = torch.nn.Linear(3, 1); x(torch.ones(2, 3)).sum().backward(); assert x.weight.grad is not None
print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__, "trl", trl.__version__)'
  echo "$key" >"$marker"
  echo "setup-python.sh: installed in $(($(date +%s) - start)) s, $(du -sh "$deps" | cut -f1)"
fi
flock -u 9

# Layer 2: this clone's venv, re-pointed at layer 1 whenever the lock changed.
venv="$root/.venv"
site="$venv/lib/python$pyver/site-packages"
deps_site="$deps/lib/python$pyver/site-packages"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.himes-deps" 2>/dev/null)" != "$deps" ]; then
  rm -rf "$venv"
  "$base" -m venv --without-pip "$venv"
  # addsitedir (not a plain path line) also runs layer 1's own .pth files.
  echo "import site; site.addsitedir('$deps_site')" >"$site/_himes_deps.pth"
  echo "$deps" >"$venv/.himes-deps"
fi
if ! "$venv/bin/python" -c 'import lora_trainer, os, sys; sys.exit(not os.path.samefile(os.path.dirname(lora_trainer.__file__), sys.argv[1]))' \
  "$root/scripts/lora_trainer/src/lora_trainer" 2>/dev/null; then
  # pip of layer 1 installs into .venv (--python); setuptools comes from layer 1 too.
  "$deps/bin/python" -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check \
    --no-deps --no-build-isolation -e scripts/lora_trainer
fi
# gguf (llama.cpp's GGUF writer, for `himes export ollama`'s merged GGUF:
# lora_trainer/export_gguf.py), pinned by hash, into this layer: adding it to
# the lock would rebuild layer 1 (4.9 GB) for a 100 kB pure-Python wheel. Its
# dependencies (numpy, pyyaml, tqdm) are in the lock.
gguf_pin='gguf==0.19.0 --hash=sha256:70bcd10edfe697fb2dad6e40af2234b9d8ece9a41a99761405121ebda1c3c1cd'
if ! "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("gguf") != "0.19.0")' 2>/dev/null; then
  req=$(mktemp)
  echo "$gguf_pin" >"$req"
  "$deps/bin/python" -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check \
    --no-deps --require-hashes -r "$req"
  rm -f "$req"
fi
"$venv/bin/python" -c 'import lora_trainer, torch; print("lora_trainer from", lora_trainer.__path__[0], "torch", torch.__version__)'
echo "setup-python.sh: dependencies $deps"
echo "setup-python.sh: interpreter $venv/bin/python (scripts/ci/python-env.sh prints it)"

#!/usr/bin/env bash
# CI setup for the reference LoRA trainer (scripts/lora_trainer): its tests and
# the conformance check need Debian's CPU PyTorch (python3-torch, 1.13 on
# bookworm) and pytest, both for /usr/bin/python3. transformers and peft are
# not needed: CI uses the tiny backend.
set -euo pipefail
if /usr/bin/python3 -c 'import torch, pytest' 2>/dev/null; then
  echo "python3-torch and python3-pytest are already installed"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -q
# Recommends (build-essential, libtorch-dev, ...) are not needed to import torch.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends python3-torch python3-pytest
/usr/bin/python3 -c 'import torch, pytest; print("torch", torch.__version__, "pytest", pytest.__version__)'

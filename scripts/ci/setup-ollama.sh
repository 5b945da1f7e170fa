#!/usr/bin/env bash
# CI setup: build the Ollama server v0.6.5 from the Go module proxy so the
# real-server integration tests in rollout/ run (they skip without it).
#
# Why a source build: models and release binaries cannot be downloaded in CI;
# the module proxy works. Newer tags do not build this way (a vendored header
# is missing from their module zip), so the version is pinned. The tests find
# the binary in $HIMES_OLLAMA_BIN, PATH, or $(go env GOPATH)/bin, where this
# installs it. The build compiles llama.cpp with cgo: a few minutes on 2 cores.
#
# Why -march=native: a plain `go install` compiles ggml's CPU kernels for
# baseline x86-64 (SSE2), with none of the AVX2/AVX-512 code a release build
# loads at run time. On this project's machines that made a MiniLM embedding
# 12x slower than with the machine's instructions (16 passages: 9.2 s vs
# 0.76 s at load 3), and SmolLM2 answers likewise. The binary is built on the
# machine that runs it, so native is safe; the flags are part of the
# installed-check below, so an older baseline build is rebuilt.
set -euo pipefail

OLLAMA_VERSION=v0.6.5
CFLAGS_NATIVE="-O3 -march=native"
bin="$(go env GOPATH | cut -d: -f1)/bin/ollama"

# Idempotent: keep a binary built from the pinned module version.
if [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -q "github.com/ollama/ollama[[:space:]]*${OLLAMA_VERSION}" \
  && go version -m "$bin" | grep -qF "CGO_CFLAGS=\"${CFLAGS_NATIVE}\""; then
  echo "ollama ${OLLAMA_VERSION} already installed at $bin"
  exit 0
fi

# cgo needs a C and C++ compiler.
if ! command -v gcc >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
  echo "installing a C/C++ toolchain for cgo"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends gcc g++ libc6-dev
fi

echo "building ollama ${OLLAMA_VERSION} (go install; a few minutes)"
start=$(date +%s)
GOBIN= CGO_ENABLED=1 CGO_CFLAGS="$CFLAGS_NATIVE" CGO_CXXFLAGS="$CFLAGS_NATIVE" go install "github.com/ollama/ollama@${OLLAMA_VERSION}"
echo "built $bin in $(( $(date +%s) - start ))s"

# Smoke check: the binary runs and reports its module version.
go version -m "$bin" | grep -q "github.com/ollama/ollama[[:space:]]*${OLLAMA_VERSION}" \
  || { echo "setup-ollama: $bin is not ollama ${OLLAMA_VERSION}" >&2; exit 1; }
"$bin" --help >/dev/null

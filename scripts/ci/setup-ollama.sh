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
# Why a fixed ISA level: a plain `go install` compiles ggml's CPU kernels
# for baseline x86-64 (SSE2), with none of the AVX2 code a release build
# loads at run time; on this project's machines that made a MiniLM
# embedding 12x slower (16 passages: 9.2 s vs 0.76 s at load 3), and
# SmolLM2 answers likewise. -march=native is not the answer: on a CPU with
# AMX it defines __AMX_INT8__, ggml-cpu.cpp then calls
# ggml_backend_amx_buffer_type(), and Ollama's cgo build never compiles
# ggml-cpu/amx/amx.cpp, so the link fails; and a binary built for one
# machine's extensions may not run on the next. x86-64-v3 (AVX2, FMA, F16C,
# BMI2: every x86-64 server CPU since 2013) keeps the fast kernels and
# defines no AVX-512 or AMX macro, so it builds and runs the same on every
# machine CI lands on. A CPU below v3 (checked in /proc/cpuinfo) gets the
# baseline build; other architectures get -O3 alone. After the build a
# smoke check starts the binary (`ollama serve` on a private port answers
# /api/version); the integration tests then run its kernels on a tiny model.
set -euo pipefail

OLLAMA_VERSION=v0.6.5
# cpu_flags prints the flags this CPU can run: x86-64-v3 when it has every
# v3 feature, else nothing beyond -O3.
cpu_flags() {
  case "$(uname -m)" in
  x86_64)
    local f
    f=$(grep -m1 '^flags' /proc/cpuinfo || true)
    for want in avx avx2 fma f16c bmi1 bmi2 movbe; do
      case " ${f#*:} " in *" $want "*) ;; *) echo "-O3"; return ;; esac
    done
    # lzcnt shows as abm in /proc/cpuinfo; xsave as xsave.
    case " ${f#*:} " in *" abm "*) echo "-O3 -march=x86-64-v3" ;; *) echo "-O3" ;; esac
    ;;
  *) echo "-O3" ;;
  esac
}
CFLAGS_BUILD=$(cpu_flags)
bin="$(go env GOPATH | cut -d: -f1)/bin/ollama"

# Idempotent: keep a binary built from the pinned module version.
if [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -q "github.com/ollama/ollama[[:space:]]*${OLLAMA_VERSION}" \
  && go version -m "$bin" | grep -qF "CGO_CFLAGS=\"${CFLAGS_BUILD}\""; then
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
GOBIN= CGO_ENABLED=1 CGO_CFLAGS="$CFLAGS_BUILD" CGO_CXXFLAGS="$CFLAGS_BUILD" go install "github.com/ollama/ollama@${OLLAMA_VERSION}"
echo "built $bin in $(( $(date +%s) - start ))s"

# Smoke check: the binary runs and reports its module version.
go version -m "$bin" | grep -q "github.com/ollama/ollama[[:space:]]*${OLLAMA_VERSION}" \
  || { echo "setup-ollama: $bin is not ollama ${OLLAMA_VERSION}" >&2; exit 1; }
"$bin" --help >/dev/null
# The binary's ggml CPU backend must load and run on this CPU: start a
# private server on a free loopback port and ask its version.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
models=$(mktemp -d)
OLLAMA_HOST="127.0.0.1:$port" OLLAMA_MODELS="$models" "$bin" serve >"$models/serve.log" 2>&1 &
pid=$!
ok=""
for _ in $(seq 1 50); do
  if curl -fsS "http://127.0.0.1:$port/api/version" >/dev/null 2>&1; then ok=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
if [ -z "$ok" ]; then
  echo "setup-ollama: $bin serve did not answer on this CPU; its log:" >&2
  tail -n 30 "$models/serve.log" >&2
  rm -rf "$models"
  exit 1
fi
rm -rf "$models"
echo "ollama ${OLLAMA_VERSION} built with CGO_CFLAGS=\"$CFLAGS_BUILD\" and serving"

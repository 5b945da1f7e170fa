#!/usr/bin/env bash
# The project's test command (README): Go tests with the race detector, then
# the steps in scripts/test.d/ (the reference trainer's Python tests and its
# conformance check). Prints each package's result and a closing
# "N passed, N failed" line counting top-level Go tests.
#
# The libraries run under -race. cmd/himes runs without it: its tests are
# end-to-end runs of the CLI, most of them as child processes (training,
# resume after SIGKILL, sweeps, transfer, retrieval serve, a browser on the
# live report), where a race-instrumented binary is 5-10x slower and would
# not fit a CI time limit on 2 cores; the concurrency they exercise lives in
# the libraries, which the race detector covers.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "-- go test -race (libraries), go test ./cmd/himes"
set +e
go test -race -count=1 -timeout 30m -v $(go list ./... | grep -v '/cmd/himes$') >"$log" 2>&1
rc=$?
go test -count=1 -timeout 30m -v ./cmd/himes >>"$log" 2>&1
rc2=$?
if [ "$rc" -eq 0 ]; then rc=$rc2; fi
set -e
grep -E '^(ok|FAIL|\?|panic:|--- FAIL)' "$log" || true
if [ "$rc" -ne 0 ]; then
  echo "-- output of the failing tests:"
  grep -v -E '^(=== (RUN|PAUSE|CONT|NAME)|--- PASS|\s+--- PASS|--- SKIP|\s+--- SKIP)' "$log" | tail -n 300
fi
passed=$(grep -c '^--- PASS' "$log" || true)
failed=$(grep -c '^--- FAIL' "$log" || true)
skipped=$(grep -c '^--- SKIP' "$log" || true)
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi # a build failure has no --- FAIL line
if [ "$skipped" -gt 0 ]; then
  # A skip is only honest when it says why (missing ../shared, no ollama
  # binary, -short): print each reason with the number of tests it skipped.
  echo "-- skipped tests, by reason:"
  awk '/^=== RUN/ { msg = "" }
       /^    [^ ]+\.go:[0-9]+: / { msg = $0; sub(/^ +[^ ]+\.go:[0-9]+: /, "", msg) }
       /^--- SKIP: / { print (msg == "" ? "(no reason given)" : substr(msg, 1, 200)) }' "$log" | sort | uniq -c | sort -rn
fi

if [ "$rc" -eq 0 ]; then
  for s in scripts/test.d/*.sh; do
    [ -e "$s" ] || continue
    echo "-- $s"
    bash "$s"
  done
fi
echo "go: $passed passed, $failed failed, $skipped skipped"
exit "$rc"

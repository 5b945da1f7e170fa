#!/usr/bin/env bash
# The project's test command (README): Go tests with the race detector, then
# the reference trainer's Python tests when their interpreter is available.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "-- go test -race ./..."
go test -race -count=1 ./... 2>&1 | tee /tmp/himes-go-test.log
for s in scripts/test.d/*.sh; do
  [ -e "$s" ] || continue
  echo "-- $s"
  bash "$s"
done

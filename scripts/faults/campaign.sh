#!/usr/bin/env bash
# The fault-injection campaign of issue 27 (docs/FAULTS.md): kills,
# interrupts and damaged run files against `himes train` on the quickstart
# config cut to 12 steps, each compared with a fault-free run. About 200 short
# processes, a few minutes on 2 cores, nice'd. Writes the table to
# ${1:-/tmp/himes-faults.md}.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-/tmp/himes-faults.md}"
HIMES_FAULT_CAMPAIGN=1 HIMES_FAULT_TABLE="$out" nice -n 10 \
  go test -count=1 -timeout 60m -run '^TestFaultCampaign$' -v ./cmd/himes | grep -E '^\s+faults_campaign_test|^(---|ok|FAIL)' || true
cat "$out"

#!/usr/bin/env bash
# The project's test commands.
#
#   bash scripts/test.sh          README's test command, the quick one: every
#                                 package's tests without the race detector
#                                 and with -short, which skips the long
#                                 end-to-end and exhaustive tests (each says
#                                 why). Tests that need a service (Ollama,
#                                 Chromium, protoc) or ../shared skip with the
#                                 reason when it is absent.
#   bash scripts/test.sh --full   the exhaustive run CI does (.ci/run):
#                                 1. the libraries with -race -short (the
#                                    race detector over every quick test);
#                                 2. without -race: cmd/himes whole, and every
#                                    library test pass 1 skipped (the long
#                                    ones, and any with a skipped subtest);
#                                 3. hser -short with -tags purego (its Go
#                                    loop where amd64 runs assembly).
#                                 Every test runs, at least once.
#
# Both print each package's result as it finishes (and a line every minute
# while compiling or a long package runs), then run the steps in
# scripts/test.d/ (the reference trainer's Python tests and its conformance
# check) whatever the Go tests gave, and close with the skipped tests grouped
# by reason and a line "go: N passed, N failed, N skipped" counting top-level
# Go tests once each (a test run in both passes counts as failed if either
# run failed; a failing scripts/test.d step counts as one failed). The exit
# status is non-zero on any failure.
#
# cmd/himes never runs under -race: its tests are end-to-end runs of the
# CLI, most of them as child processes (training, resume after SIGKILL,
# sweeps, transfer, retrieval serve, a browser on the live report), where a
# race-instrumented binary is 5-10x slower; the concurrency they exercise
# lives in the libraries, which pass 1 covers. The long library tests
# (walks over all of Unicode, shared-data collections, large index builds)
# are single-goroutine checks or slow under -race for no gain, so they run
# in pass 2.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=quick
case "${1:-}" in
"") ;;
--full) mode=full ;;
-h | --help)
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
  ;;
*)
  echo "usage: bash scripts/test.sh [--full]" >&2
  exit 2
  ;;
esac

log=$(mktemp)
results=$(mktemp)
beat=""
cleanup() {
  [ -n "$beat" ] && kill "$beat" 2>/dev/null
  rm -f "$log" "$results"
}
trap cleanup EXIT
start=$SECONDS
elapsed() { printf '%dm%02ds' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)); }
# Packages with the fewest dependencies first: go test prints results in
# the order of its arguments, so leaves report while the rest still compile
# (in import-path order, ablate and cmd/himes, which need everything, would
# hold back every line until the whole build is done).
pkgs=$(go list -f '{{len .Deps}} {{.ImportPath}}' ./... | sort -n -k1,1 -k2,2 | cut -d' ' -f2)
libs=$(echo "$pkgs" | grep -v '/cmd/himes$')
npkg=$(echo "$pkgs" | wc -l)

# heartbeat prints a line every minute: a cold cache compiles for minutes
# before the first package reports, and go test prints a package only when
# it is done.
heartbeat() {
  while sleep 60 </dev/null >/dev/null 2>&1; do
    echo "   ... $(elapsed): $(grep -cE '^(ok|FAIL|\?) ' "$log" || true) package runs done, compiling or testing the rest"
  done
}

# gotest runs go test -v with the given arguments, appending to the log and
# printing each package's result line as it comes; it returns go's status.
gotest() {
  set +e
  go test -count=1 -v "$@" 2>&1 | tee -a "$log" | grep --line-buffered -E '^(ok|FAIL|\?|panic:|--- FAIL)'
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}

# results lists "package<TAB>test<TAB>PASS|FAIL|SKIP|SUBSKIP<TAB>skip reason"
# for the top-level tests of a go test -v log (a package's lines come as one
# block that ends with its ok/FAIL line; SUBSKIP: a skipped subtest).
parse() {
  awk -F'\n' '
    /^=== RUN/ { msg = "" }
    /^    [^ ]+\.go:[0-9]+: / { msg = $0; sub(/^ +[^ ]+\.go:[0-9]+: /, "", msg) }
    /^--- (PASS|FAIL|SKIP): / {
      split($0, f, " "); n++; name[n] = f[3]; st[n] = substr(f[2], 1, 4)
      why[n] = (st[n] == "SKIP" ? (msg == "" ? "(no reason given)" : substr(msg, 1, 200)) : "")
    }
    /^ +--- SKIP: / { split($0, f, " "); split(f[3], p, "/"); n++; name[n] = p[1]; st[n] = "SUBSKIP"; why[n] = "" }
    /^(ok|FAIL)[ \t]+[^ \t]+/ {
      split($0, f, /[ \t]+/)
      for (i = 1; i <= n; i++) print f[2] "\t" name[i] "\t" st[i] "\t" why[i]
      n = 0
    }' "$1"
}

heartbeat &
beat=$!
rc=0
if [ "$mode" = quick ]; then
  echo "-- go test -short ./... ($npkg packages; bash scripts/test.sh --full runs everything, with -race)"
  gotest -short -timeout 20m $pkgs || rc=$?
else
  echo "-- pass 1: go test -race -short (the libraries)"
  gotest -race -short -timeout 30m $libs || rc=$?
  # package<TAB>A|B|C: the tests pass 1 skipped, or ran with a subtest skipped
  rerun=$(parse "$log" | awk -F'\t' '$3 == "SKIP" || $3 == "SUBSKIP" { if (!seen[$1 FS $2]++) t[$1] = (t[$1] == "" ? "" : t[$1] "|") $2 }
                                      END { for (p in t) print p "\t" t[p] }' | sort)
  echo "-- pass 2: go test ./cmd/himes, and the library tests pass 1 skipped ($(elapsed) so far)"
  gotest -timeout 30m ./cmd/himes || { r=$?; [ "$rc" -eq 0 ] && rc=$r; }
  while IFS=$'\t' read -r pkg tests; do
    [ -n "$pkg" ] || continue
    gotest -timeout 30m -run "^($tests)\$" "$pkg" || { r=$?; [ "$rc" -eq 0 ] && rc=$r; }
  done <<<"$rerun"
  # hser's interning loop is assembly on amd64; the purego tag builds the
  # Go loop other architectures run, so the scorer's tests cover it too.
  echo "-- pass 3: go test -tags purego ./hser (the Go loop in place of the assembly, $(elapsed) so far)"
  gotest -short -tags purego -timeout 10m ./hser || { r=$?; [ "$rc" -eq 0 ] && rc=$r; }
fi
kill "$beat" 2>/dev/null || true
wait "$beat" 2>/dev/null || true
beat=""
echo "-- go test took $(elapsed)"

if [ "$rc" -ne 0 ]; then
  echo "-- output of the failing tests:"
  grep -v -E '^(=== (RUN|PAUSE|CONT|NAME)|--- PASS|\s+--- PASS|--- SKIP|\s+--- SKIP)' "$log" | tail -n 300
fi
# One outcome per test: failed if any run failed, else passed if any run
# passed, else skipped (with the reason of its last skip).
parse "$log" | awk -F'\t' '
  $3 == "SUBSKIP" { next }
  { k = $1 FS $2; if (!(k in out)) order[++n] = k
    if ($3 == "FAIL" || out[k] == "FAIL") out[k] = "FAIL"
    else if ($3 == "PASS" || out[k] == "PASS") out[k] = "PASS"
    else { out[k] = "SKIP"; why[k] = $4 } }
  END { for (i = 1; i <= n; i++) print out[order[i]] "\t" why[order[i]] }' >"$results"
passed=$(grep -c '^PASS' "$results" || true)
failed=$(grep -c '^FAIL' "$results" || true)
skipped=$(grep -c '^SKIP' "$results" || true)
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi # a build failure has no --- FAIL line

# The steps of scripts/test.d run whatever the Go tests gave: a Go failure
# must not hide the Python tests' result.
for s in scripts/test.d/*.sh; do
  [ -e "$s" ] || continue
  echo "-- $s"
  if ! bash "$s"; then
    echo "-- $s FAILED"
    failed=$((failed + 1))
    [ "$rc" -eq 0 ] && rc=1
  fi
done

if [ "$skipped" -gt 0 ]; then
  # A skip is only honest when it says why (missing ../shared, no ollama
  # binary, -short): each reason with the number of tests it skipped.
  echo "-- skipped tests, by reason:"
  awk -F'\t' '$1 == "SKIP" { print $2 }' "$results" | sort | uniq -c | sort -rn
fi
echo "-- $mode run took $(elapsed)"
echo "go: $passed passed, $failed failed, $skipped skipped"
exit "$rc"

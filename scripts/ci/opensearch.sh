#!/usr/bin/env bash
# A three-node OpenSearch cluster on loopback, one JVM per node, for the
# retrieval tests (set up by setup-opensearch.sh). .ci/run starts it before
# the tests and stops it after them; the fault tests start their own in a
# temporary folder and kill or stall single nodes of it.
#
#   opensearch.sh start            start every node (fresh data), wait for green
#   opensearch.sh stop             stop every node (SIGTERM, then SIGKILL after 30s)
#   opensearch.sh status           the cluster's health, or why there is none
#   opensearch.sh start-node N     (re)start node N on its existing data
#   opensearch.sh stop-node N      stop node N (SIGTERM)
#
# Environment (defaults in brackets):
#   HIMES_OPENSEARCH_DIR   the cluster's folder: node-N/{config,data,logs}, pids, urls
#                          [${XDG_CACHE_HOME:-~/.cache}/himes/opensearch-cluster]
#   HIMES_OPENSEARCH_PORT  node N serves HTTP on PORT+N-1 and its transport on PORT+100+N-1 [9250]
#   HIMES_OPENSEARCH_NODES number of nodes [3]
#   HIMES_OPENSEARCH_HEAP  heap of each node [256m]
#   HIMES_OPENSEARCH_WAIT  seconds to wait for green [180]
# `start` writes the nodes' URLs, comma-separated, to DIR/urls (what the
# tests read when HIMES_OPENSEARCH_URL is unset) and prints them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version=$(sed -n 's:.*<opensearch.version>\(.*\)</opensearch.version>.*:\1:p' "$here/opensearch/pom.xml")
cache="${HIMES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/himes}"
install="$cache/opensearch-$version"
dir="${HIMES_OPENSEARCH_DIR:-$cache/opensearch-cluster}"
port="${HIMES_OPENSEARCH_PORT:-9250}"
nodes="${HIMES_OPENSEARCH_NODES:-3}"
heap="${HIMES_OPENSEARCH_HEAP:-256m}"
wait_s="${HIMES_OPENSEARCH_WAIT:-180}"

log() { echo "opensearch.sh: $*" >&2; }
die() { log "$*"; exit 1; }

http_port() { echo $((port + $1 - 1)); }
node_pid() { cat "$dir/node-$1/pid" 2>/dev/null || true; }
# running PID: the process exists and is not a zombie. A node started here is
# orphaned once this script exits; where PID 1 does not reap orphans (some
# containers), a killed node stays a zombie that `kill -0` still finds, and
# start-node would skip restarting it as "already running".
running() { kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
alive() { local p; p=$(node_pid "$1"); [ -n "$p" ] && running "$p"; }

urls() {
  local n out=""
  for n in $(seq 1 "$nodes"); do out="${out:+$out,}http://127.0.0.1:$(http_port "$n")"; done
  echo "$out"
}

# health prints the cluster health JSON from any live node, or fails.
health() {
  local n
  for n in $(seq 1 "$nodes"); do
    alive "$n" || continue
    curl -fsS --max-time 5 "http://127.0.0.1:$(http_port "$n")/_cluster/health$1" 2>/dev/null && return 0
  done
  return 1
}

configure() {
  local n=$1 home="$dir/node-$1" seeds="" masters="" i
  for i in $(seq 1 "$nodes"); do
    seeds="${seeds:+$seeds, }\"127.0.0.1:$((port + 100 + i - 1))\""
    masters="${masters:+$masters, }\"node-$i\""
  done
  mkdir -p "$home/config" "$home/data" "$home/logs"
  cat >"$home/config/opensearch.yml" <<YML
cluster.name: himes-test
node.name: node-$n
path.data: $home/data
path.logs: $home/logs
network.host: 127.0.0.1
http.port: $(http_port "$n")
transport.port: $((port + 100 + n - 1))
discovery.seed_hosts: [$seeds]
cluster.initial_cluster_manager_nodes: [$masters]
# A shared CI disk may be nearly full; watermarks would refuse every shard.
cluster.routing.allocation.disk.threshold_enabled: false
# An index comes only from \`himes index push\` (or a test), never from a stray write.
action.auto_create_index: false
YML
  cat >"$home/config/log4j2.properties" <<L4J
status = error
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d{ISO8601}][%-5p][%c{1.}] [node-$n] %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
L4J
}

start_node() {
  local n=$1 home="$dir/node-$1"
  [ -f "$install/stamp" ] || die "OpenSearch $version is not set up in $install: run scripts/ci/setup-opensearch.sh"
  command -v java >/dev/null 2>&1 || die "no java on PATH (OpenSearch $version needs Java 17+)"
  if alive "$n"; then log "node-$n already running (pid $(node_pid "$n"))"; return 0; fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$(http_port "$n")") 2>/dev/null; then
    die "port $(http_port "$n") is taken by another process: set HIMES_OPENSEARCH_PORT"
  fi
  [ -f "$home/config/opensearch.yml" ] || configure "$n"
  # Flags from OpenSearch's own jvm.options that matter without its launcher;
  # the serial collector keeps a small heap's overhead (memory and a CPU) low.
  nohup java -Xms"$heap" -Xmx"$heap" -XX:+UseSerialGC -XX:MaxDirectMemorySize=128m \
    -Xss1m -Djava.awt.headless=true -Dfile.encoding=UTF-8 -Djava.locale.providers=SPI,COMPAT \
    -Dio.netty.noUnsafe=true -Dio.netty.noKeySetOptimization=true -Dio.netty.recycler.maxCapacityPerThread=0 \
    -Dlog4j.shutdownHookEnabled=false -Dlog4j2.disable.jmx=true -Dlog4j2.formatMsgNoLookups=true \
    -Dopensearch.set.netty.runtime.available.processors=false \
    -cp "$install/lib/*:$install/classes" HimesNode "$home" >"$home/logs/stdout.log" 2>&1 </dev/null &
  echo $! >"$home/pid"
  log "node-$n started (pid $!, http $(http_port "$n"), log $home/logs/stdout.log)"
}

stop_node() {
  local n=$1 p i
  p=$(node_pid "$n")
  if [ -z "$p" ] || ! running "$p"; then rm -f "$dir/node-$n/pid"; return 0; fi
  kill -CONT "$p" 2>/dev/null || true # a stalled (SIGSTOPped) node must run to exit
  kill -TERM "$p" 2>/dev/null || true
  for i in $(seq 1 60); do running "$p" || break; sleep 0.5; done
  if running "$p"; then log "node-$n (pid $p) ignored SIGTERM for 30s: SIGKILL"; kill -KILL "$p" 2>/dev/null || true; fi
  rm -f "$dir/node-$n/pid"
  log "node-$n stopped"
}

wait_green() {
  local deadline=$(( $(date +%s) + wait_s )) h n
  while [ "$(date +%s)" -lt "$deadline" ]; do
    for n in $(seq 1 "$nodes"); do
      alive "$n" || { tail -n 40 "$dir/node-$n/logs/stdout.log" >&2 || true; die "node-$n exited while starting (log above)"; }
    done
    if h=$(health "?wait_for_status=green&wait_for_nodes=$nodes&timeout=5s") && echo "$h" | grep -q '"status":"green"' \
       && echo "$h" | grep -q "\"number_of_nodes\":$nodes,"; then
      log "cluster green: $h"
      return 0
    fi
    sleep 1
  done
  health "" >&2 || true
  die "the cluster was not green with $nodes nodes after ${wait_s}s (logs: $dir/node-*/logs/stdout.log)"
}

cmd="${1:-}"
case "$cmd" in
  start)
    mkdir -p "$dir"
    running=0
    for n in $(seq 1 "$nodes"); do if alive "$n"; then running=$((running + 1)); fi; done
    if [ "$running" -eq 0 ]; then
      rm -rf "${dir:?}"/node-* # a fresh cluster: no index left from an earlier run
      for n in $(seq 1 "$nodes"); do configure "$n"; done
    fi
    t0=$(date +%s)
    # A start that fails leaves no node behind.
    trap 'rc=$?; if [ "$rc" -ne 0 ]; then for n in $(seq 1 "$nodes"); do stop_node "$n"; done; fi' EXIT
    for n in $(seq 1 "$nodes"); do start_node "$n"; done
    wait_green
    trap - EXIT
    urls >"$dir/urls"
    log "$nodes nodes green in $(( $(date +%s) - t0 ))s; URLs in $dir/urls"
    urls
    ;;
  stop)
    for n in $(seq 1 "$nodes"); do stop_node "$n"; done
    rm -f "$dir/urls"
    ;;
  status)
    health "?pretty" || die "no node of $dir answers"
    ;;
  start-node)
    [ -n "${2:-}" ] || die "usage: $0 start-node N"
    start_node "$2"
    ;;
  stop-node)
    [ -n "${2:-}" ] || die "usage: $0 stop-node N"
    stop_node "$2"
    ;;
  *)
    die "usage: $0 start|stop|status|start-node N|stop-node N"
    ;;
esac

#!/usr/bin/env bash
# CI setup for the retrieval tests against a real search cluster: resolves a
# pinned OpenSearch server (scripts/ci/opensearch/pom.xml) from Maven Central
# and compiles its launcher (HimesNode.java) into
#   ${HIMES_CACHE:-~/.cache/himes}/opensearch-<version>/{lib,classes}
# which scripts/ci/opensearch.sh runs. Idempotent: a stamp of the pom and the
# launcher's sha256 skips the work when nothing changed. Needs Java 17+ (javac)
# and Maven; installs Debian's when missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$here/opensearch"
version=$(sed -n 's:.*<opensearch.version>\(.*\)</opensearch.version>.*:\1:p' "$src/pom.xml")
dir="${HIMES_CACHE:-$HOME/.cache/himes}/opensearch-$version"
stamp=$(cat "$src/pom.xml" "$src/HimesNode.java" | sha256sum | cut -d' ' -f1)

if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp" ]; then
  echo "opensearch $version already set up in $dir"
  exit 0
fi

if ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  echo "installing a JDK and Maven"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends openjdk-17-jdk-headless maven
fi
major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
if [ "${major%%.*}" -lt 17 ]; then
  echo "setup-opensearch: OpenSearch $version needs Java 17 or newer, java is $major" >&2
  exit 1
fi

echo "resolving opensearch $version from Maven Central into $dir"
start=$(date +%s)
tmp="$dir.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/lib" "$tmp/classes"
trap 'rm -rf "$tmp"' EXIT
mvn -q -B -Dstyle.color=never -f "$src/pom.xml" dependency:copy-dependencies -DoutputDirectory="$tmp/lib" -DincludeScope=runtime
javac -nowarn -d "$tmp/classes" -cp "$tmp/lib/*" "$src/HimesNode.java"
echo "$stamp" >"$tmp/stamp"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "opensearch $version set up in $dir ($(ls "$dir/lib" | wc -l) jars, $(du -sh "$dir/lib" | cut -f1)) in $(( $(date +%s) - start ))s"

#!/usr/bin/env bash
# CI setup for the live-report test (cmd/himes TestReportWatchInChromium):
# headless Chromium renders report.html while a run trains (the test fails
# under CI=true without it).
set -euo pipefail
if command -v chromium >/dev/null; then
  echo "chromium is already installed"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends chromium
chromium --version

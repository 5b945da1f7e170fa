#!/usr/bin/env bash
# CI setup for internal/tbevent's decoding test: protoc compiles TensorBoard's
# event/summary .proto files and Debian's python3-protobuf decodes the event
# files the run writes with them (the test fails under CI=true without them).
set -euo pipefail
if command -v protoc >/dev/null && /usr/bin/python3 -c 'import google.protobuf' 2>/dev/null; then
  echo "protoc and python3-protobuf are already installed"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends protobuf-compiler python3-protobuf
protoc --version
/usr/bin/python3 -c 'import google.protobuf; print("python3-protobuf", google.protobuf.__version__)'

#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, builds the consumer against it, and runs it.
set -euo pipefail
build=$1
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 29517)
SHARC_ROOT=127.0.0.1:$port SHARC_RANK=0 SHARC_WORLD_SIZE=1 SHARC_FI_PROVIDER='tcp;ofi_rxm' \
  FI_TCP_IFACE=lo LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/build/consumer"

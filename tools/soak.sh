#!/usr/bin/env bash
# The full soak (docs/faults.md "Soak"): 100,000 small (1-1000 elements) and 1,000 large (1-8 MiB)
# collectives on RANKS ranks of this host over communicators split from the world and destroyed
# every 200 calls (500 splits: a leak of 1 KiB per split crosses the 256 KiB heap bound), every
# result checked; private resident memory (bound 8 MiB), heap in use (256 KiB), open fds,
# threads and /dev/shm mappings, sampled every 1,000 calls after a 5,000-call warm-up, must
# stay flat.
# Runs twice: sharc's shared-memory transport (SHARC_SHM=1, the default) and SHARC_SHM=0
# (libfabric tcp;ofi_rxm carries everything).
#   usage: tools/soak.sh [RANKS] [extra sharc_soak options...]     (default: 4 ranks)
#   SOAK=path/to/sharc_soak picks the binary (default: build/tests/soak/sharc_soak);
#   SHMS="1" runs one transport only. Per-rank samples: $SOAK_OUT (default /tmp/sharc-soak).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
soak=${SOAK:-$root/build/tests/soak/sharc_soak}
ranks=${1:-4}
shift || true
out=${SOAK_OUT:-/tmp/sharc-soak}
mkdir -p "$out"
[[ -x $soak ]] || { echo "soak.sh: $soak not built (cmake --build build --target sharc_soak)" >&2; exit 1; }
export SHARC_FI_PROVIDER=${SHARC_FI_PROVIDER:-tcp;ofi_rxm} FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
export SHARC_SOCKET_IFNAME=${SHARC_SOCKET_IFNAME:-lo} SHARC_TIMEOUT_MS=${SHARC_TIMEOUT_MS:-120000}
status=0
for shm in ${SHMS:-1 0}; do
  echo "== SHARC_SHM=$shm, $ranks ranks, provider $SHARC_FI_PROVIDER"
  start=$(date +%s)
  SHARC_SHM=$shm "$soak" --ranks "$ranks" --small 100000 --large 1000 --split-every 200 \
    --warmup 5000 --sample-every 1000 --deadline 7200 --samples-csv "$out/shm$shm" "$@" ||
    status=1
  echo "== SHARC_SHM=$shm: $(($(date +%s) - start)) s; samples in $out/shm$shm.rank*.csv"
done
exit $status

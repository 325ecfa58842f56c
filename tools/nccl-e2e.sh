#!/usr/bin/env bash
# Runs unmodified NCCL over sharc's network plugin: NRANKS processes on this machine's GPU(s),
# each claiming its own host (NCCL_HOSTID), so that every byte between them goes through
# NCCL_NET_PLUGIN=sharc. Checks each collective (tests/nccl/nccl_e2e.cc) and that NCCL
# really loaded the plugin. Exit 77 (skip) without a GPU.
#
#   tools/nccl-e2e.sh BUILD_DIR [NRANKS] [extra NCCL_*=... settings]
#   e.g. tools/nccl-e2e.sh build 2 NCCL_COLLNET_ENABLE=1
set -u
build=${1:?usage: nccl-e2e.sh BUILD_DIR [NRANKS] [VAR=VALUE ...]}
nranks=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
exe="$build/tests/nccl/sharc_nccl_e2e"
plugin_dir="$build/plugin/nccl"
[ -x "$exe" ] || { echo "nccl-e2e: $exe not built (needs CUDA and NCCL)"; exit 77; }
work=$(mktemp -d /tmp/sharc-nccl-e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT

pids=()
for ((r = 0; r < nranks; r++)); do
  env LD_LIBRARY_PATH="$plugin_dir:${LD_LIBRARY_PATH:-}" NCCL_NET_PLUGIN=sharc \
      NCCL_HOSTID="sharc-e2e-node$r" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET FI_TCP_IFACE=${FI_TCP_IFACE:-lo} \
      SHARC_SOCKET_IFNAME=${SHARC_SOCKET_IFNAME:-lo} "$@" \
      timeout 300 "$exe" "$r" "$nranks" "$work/id" >"$work/rank$r.log" 2>&1 &
  pids+=($!)
done
status=0
for r in "${!pids[@]}"; do
  wait "${pids[$r]}"
  rc=$?
  [ $rc -eq 77 ] && { cat "$work/rank$r.log"; exit 77; }
  [ $rc -ne 0 ] && status=1
done
for ((r = 0; r < nranks; r++)); do
  echo "---- rank $r"
  grep -E "nccl_e2e|NET/Plugin|Using network|NET/sharc|CollNet|WARN" "$work/rank$r.log" | head -60
done
if ! grep -q "Using network sharc" "$work/rank0.log"; then
  echo "nccl-e2e: FAILED: NCCL did not use the sharc network plugin"
  status=1
fi
[ $status -eq 0 ] && echo "nccl-e2e: PASSED ($nranks ranks over NCCL_NET_PLUGIN=sharc)" ||
  echo "nccl-e2e: FAILED"
exit $status

#!/usr/bin/env bash
# check_symbols.sh <libnccl-net-sharc.so> <symbol_check>: the plugin exports exactly NCCL's
# eight plugin structs (no C++ or engine symbols), needs no CUDA or NCCL library, and loads
# and initializes without pulling CUDA in (symbol_check). Ends with a PASS or FAIL line.
set -u
so=${1:?usage: check_symbols.sh <plugin.so> <symbol_check>}
checker=${2:?usage: check_symbols.sh <plugin.so> <symbol_check>}
failed=0
problem() { echo "check_symbols: FAILED: $*" >&2; failed=1; }

[[ -f $so ]] || { echo "FAIL: check_symbols: no such file $so"; exit 1; }

# 1. Exactly the plugin structs, as data objects.
expected=$(printf 'ncclCollNetPlugin_v%s\n' 8 9 10 11; printf 'ncclNetPlugin_v%s\n' 8 9 10 11)
expected=$(sort <<<"$expected")
if ! defined=$(nm -D --defined-only "$so"); then
  problem "nm -D failed on $so"
  defined=""
fi
# "ADDRESS TYPE NAME[@VERSION]"; symbols without an address (none expected) have two fields.
names=$(awk 'NF >= 2 {sub(/@.*/, "", $NF); print $NF}' <<<"$defined" | sort -u)
if [[ $names != "$expected" ]]; then
  problem "exported symbols differ from the 8 plugin structs:"
  diff <(echo "$expected") <(echo "$names") | sed -n 's/^[<>]/  &/p' >&2
fi
while read -r _ type name; do
  [[ -z ${name:-} ]] && continue
  case $type in
    D|d|B|b|R|r|V|v|G|g|S|s) ;;
    *) problem "$name is exported with type '$type', expected a data object" ;;
  esac
done <<<"$defined"

# 2. No CUDA / NCCL libraries needed, directly or through a dependency.
needed=$(readelf -d "$so" | awk '/\(NEEDED\)/ {gsub(/[\[\]]/, "", $NF); print $NF}')
echo "NEEDED: $(tr '\n' ' ' <<<"$needed")"
if grep -Eq '^(libcuda|libcudart|libnccl|libnvidia)' <<<"$needed"; then
  problem "NEEDED lists a CUDA/NCCL library: $(grep -E '^(libcuda|libcudart|libnccl|libnvidia)' <<<"$needed" | tr '\n' ' ')"
fi
if deps=$(ldd "$so" 2>&1); then
  if grep -Eq 'libcuda|libcudart|libnccl|libnvidia' <<<"$deps"; then
    problem "a dependency pulls in CUDA/NCCL: $(grep -E 'libcuda|libcudart|libnccl|libnvidia' <<<"$deps" | tr '\n' ' ')"
  fi
  if grep -q 'not found' <<<"$deps"; then
    problem "unresolved dependency: $(grep 'not found' <<<"$deps" | tr '\n' ' ')"
  fi
else
  problem "ldd failed: $deps"
fi

# 3. Loading, initializing and reading the properties (as the other NCCL tests run it:
# loopback only), with the default provider and with shm (which has FI_HMEM: the plugin must
# still not load CUDA to answer ptrSupport).
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo} SHARC_SOCKET_IFNAME=${SHARC_SOCKET_IFNAME:-lo}
if ! timeout 60 "$checker" "$so"; then
  problem "symbol_check failed (see above)"
fi
if ! SHARC_FI_PROVIDER=shm timeout 60 "$checker" "$so"; then
  problem "symbol_check with SHARC_FI_PROVIDER=shm failed (see above)"
fi

if ((failed)); then
  echo "FAIL: check_symbols: $so"
  exit 1
fi
echo "PASS: check_symbols: $so exports exactly the 8 plugin structs, needs no CUDA, loads cleanly"

#!/usr/bin/env bash
# The validation table of the tuner's cost model (docs/planning.md "On the emulated cluster";
# the table: docs/measurements.md "Model against the emulated cluster"): runs
# tools/validate_model.py over the emulated cluster (tools/emulate-cluster.sh: needs root and
# network namespaces; exits 77 without) and writes the table, the JSON results and a plot.
#
#   tools/validate-model.sh BUILD_DIR [OUT_DIR]      (default OUT_DIR /tmp/sharc-validate)
#
# Layouts 2,2 / 1,1,1,1 / 3,1 / 2,1,1 / 2,2 on two rails at 200mbit, 2,2 and 3,1 also at
# 1gbit, 64 KiB to 16 MiB (64 MiB for 2,2 at 1gbit), uncalibrated (the link rate from the
# emulation: SHARC_NIC_MBITS) and, for 2,2 and 3,1 at 200mbit, calibrated (sharc-perf
# --calibrate on the same cluster). About 15 minutes on a 2-core machine.
set -euo pipefail
build=${1:?usage: tools/validate-model.sh BUILD_DIR [OUT_DIR]}
out=${2:-/tmp/sharc-validate}
here=$(cd "$(dirname "$0")" && pwd)
perf="$build/perf/sharc-perf"
run() { python3 "$here/validate_model.py" --perf "$perf" --out "$out" "$@"; }
common=(--repeats 2 --iters 3 --warmup 3)
run "${common[@]}" --cases 2,2 1,1,1,1 3,1 2,1,1 2,2@2 --rates 200mbit --max 16M >/dev/null
run "${common[@]}" --cases 3,1 --rates 1gbit --max 16M >/dev/null
run "${common[@]}" --cases 2,2 --rates 1gbit --max 64M >/dev/null
run --repeats 1 --iters 3 --warmup 3 --cases 2,2 3,1 --rates 200mbit --max 16M \
  --calibrate --no-uncalibrated >/dev/null
plot=()
/usr/bin/python3 -c "import matplotlib" 2>/dev/null && plot=(--plot "$out/validate.png")
# The table of every saved result (the plot needs Debian's python3-matplotlib).
if ((${#plot[@]})); then
  /usr/bin/python3 "$here/validate_model.py" --from "$out" "${plot[@]}"
else
  python3 "$here/validate_model.py" --from "$out"
fi

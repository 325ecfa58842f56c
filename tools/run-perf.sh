#!/usr/bin/env bash
# The main benchmark job: installs the dependencies, builds (preset default), then runs
#   sharc-perf all_gather     -N 4 -b 1K -e 64M -f 4 -c 1
#   sharc-perf reduce_scatter -N 4 -b 1K -e 64M -f 4 -c 1
# Extra arguments are passed to both runs (e.g. -d all, --json out.json, -n 50).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${SHARC_JOBS:-2}

bash tools/install-deps.sh
cmake --preset default
cmake --build --preset default -j"${jobs}" --target sharc-perf

perf=build/perf/sharc-perf
status=0
for coll in all_gather reduce_scatter; do
  echo
  echo "==== sharc-perf ${coll} -N 4 -b 1K -e 64M -f 4 -c 1 $* ===="
  "$perf" "$coll" -N 4 -b 1K -e 64M -f 4 -c 1 "$@" || status=$?
done
echo
if [[ $status -eq 0 ]]; then
  echo "SUMMARY: sharc-perf all_gather and reduce_scatter PASSED"
else
  echo "SUMMARY: sharc-perf FAILED (exit status ${status})"
fi
exit "$status"

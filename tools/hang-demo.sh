#!/usr/bin/env bash
# A hang on purpose, and its diagnosis: 4 ranks of `sharc-perf all_gather` on this host with
# flight records on (SHARC_TRACE_DIR), rank 2 frozen with SIGSTOP once the job runs; the other
# ranks time out (SHARC_TIMEOUT_MS=8000), write their records and fail; then `sharc-trace`
# reads the records and names rank 2, its pid and the call on its first line.
#
#   bash tools/hang-demo.sh [DIR]        (default DIR: a fresh temporary directory; needs a build in build/)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
perf=$root/build/perf/sharc-perf
[[ -x $perf ]] || { echo "hang-demo: build first (cmake --build --preset default)" >&2; exit 2; }
dir=${1:-$(mktemp -d /tmp/sharc-hang-demo.XXXXXX)}
mkdir -p "$dir"
log=$dir/sharc-perf.log
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
echo "== 4 ranks of sharc-perf all_gather; records go to $dir"
SHARC_TRACE_DIR=$dir SHARC_TIMEOUT_MS=8000 timeout 120 \
  "$perf" all_gather -N 4 -b 400000 -e 400000 -n 1000000 >"$log" 2>&1 &
job=$!
pid2=""
for _ in $(seq 1 240); do
  pid2=$(awk '/^#  Rank  2 Pid/ {print $5}' "$log")
  [[ -n $pid2 ]] && break
  sleep 0.5
done
[[ -n $pid2 ]] || { cat "$log"; echo "hang-demo: the job did not start" >&2; exit 1; }
sleep 3
echo "== kill -STOP $pid2   (rank 2)"
kill -STOP "$pid2"
wait "$job" || true   # the other ranks fail after 8 s; sharc-perf then ends rank 2
kill -KILL "$pid2" 2>/dev/null || true
echo "== what the ranks said"
grep -E "^sharc-perf: rank" "$log" | cut -c1-300 || true
echo "== sharc-trace $dir"
python3 "$root/tools/sharc-trace" "$dir"

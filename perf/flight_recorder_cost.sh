#!/usr/bin/env bash
# The flight recorder's cost against the cheapest call it records, in one run: the median
# nanoseconds per recorded call (Google Benchmark, ring full) over the median microseconds of
# a 1-element AllReduce between 2 ranks of this host (sharc-perf). Usage:
#   perf/flight_recorder_cost.sh [BUILD_DIR]      (default build/)
set -euo pipefail
build=${1:-build}
bench=$build/perf/sharc_bench_flight_recorder
perf=$build/perf/sharc-perf
for b in "$bench" "$perf"; do
  [[ -x $b ]] || { echo "missing $b (cmake --build $build)" >&2; exit 2; }
done
record_ns=$("$bench" --benchmark_filter='BM_RecordCall/1' --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_format=csv 2>/dev/null |
  awk -F, '/_median/ {print $4}')  # cpu_time: the caller's own cost
# sharc-perf's out-of-place time column (us) for 4 bytes (one float).
allreduce_us=$("$perf" all_reduce -N 2 -b 4 -e 4 -n 5000 -w 500 -c 0 |
  awk '!/^#/ && NF > 8 {print $6; exit}')
awk -v ns="$record_ns" -v us="$allreduce_us" 'BEGIN {
  printf "flight recorder: %.1f ns per call (CPU time, median of 5); 1-element AllReduce on 2 ranks: %.2f us\n", ns, us
  printf "cost: %.3f %% of the call\n", 100 * ns / (us * 1000)
}'

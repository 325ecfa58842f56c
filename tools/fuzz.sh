#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, AddressSanitizer and UBSan in
# build-fuzz (CMake preset "fuzz") and runs each for a bounded time, starting from the seeds
# in tests/fuzz/corpus/<target>. Prints, per target, the executions, the new inputs found and
# the findings (crash, leak, timeout or out-of-memory inputs, kept in
# build-fuzz/fuzz-artifacts/); exits 1 when there is a finding.
#
#   tools/fuzz.sh                  every target for 20 s
#   tools/fuzz.sh -t 60 shm_fifo   one target for 60 s
#   tools/fuzz.sh --seed           rewrite tests/fuzz/corpus from sharc's own code, then run
#   tools/fuzz.sh --list           the targets
#
# Reproduce a finding: build-fuzz/tests/fuzz/fuzz_<target> build-fuzz/fuzz-artifacts/<file>
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-fuzz"
TARGETS=(unique_id bootstrap_client root_server net_handle shm_fifo shared_buffers tuner_file env)
SECONDS_EACH=20
SEED=0
BUILD_FIRST=1
CHOSEN=()

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -t|--time) SECONDS_EACH="$2"; shift 2 ;;
    --seed) SEED=1; shift ;;
    --no-build) BUILD_FIRST=0; shift ;;
    --list) printf '%s\n' "${TARGETS[@]}"; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) CHOSEN+=("$1"); shift ;;
  esac
done
if [[ ${#CHOSEN[@]} -gt 0 ]]; then
  for t in "${CHOSEN[@]}"; do
    [[ " ${TARGETS[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target '$t' (--list)" >&2; exit 2; }
  done
  TARGETS=("${CHOSEN[@]}")
fi
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (Debian: apt-get install clang)" >&2
  exit 2
fi

start=$(date +%s)
if [[ $BUILD_FIRST == 1 ]]; then
  launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  (cd "$ROOT" && cmake --preset fuzz "${launcher[@]}" >/dev/null)
  build_targets=()
  for t in "${TARGETS[@]}"; do build_targets+=("fuzz_$t"); done
  [[ $SEED == 1 ]] && build_targets+=(fuzz_make_seeds)
  cmake --build "$BUILD" --target "${build_targets[@]}" -j "$(nproc)"
fi
built=$(date +%s)
if [[ $SEED == 1 ]]; then
  "$BUILD/tests/fuzz/fuzz_make_seeds" "$ROOT/tests/fuzz/corpus"
fi

# allow_user_segv_handler=0: a provider library loaded with libfabric (PSM's libinfinipath)
# installs a SIGSEGV handler that exits quietly; keep the sanitizer's report instead.
export ASAN_OPTIONS="allow_user_segv_handler=0:detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export SHARC_DEBUG=NONE  # rejected peers are logged: not once per execution

mkdir -p "$BUILD/fuzz-artifacts" "$BUILD/fuzz-logs"
failed=0
rows=()
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/fuzz-corpus/$t"  # grows between runs; the repository's seeds stay read-only
  mkdir -p "$corpus"
  log="$BUILD/fuzz-logs/$t.log"
  before=$(ls "$BUILD/fuzz-artifacts" | grep -c "^$t-" || true)
  rc=0
  # -timeout: one input running longer is a finding (a hang); the outer timeout is a guard.
  timeout --kill-after=10 $((SECONDS_EACH + 120)) \
    "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=30 -rss_limit_mb=2560 \
    -print_final_stats=1 -artifact_prefix="$BUILD/fuzz-artifacts/$t-" \
    "$corpus" "$ROOT/tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  after=$(ls "$BUILD/fuzz-artifacts" | grep -c "^$t-" || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  added=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  findings=$((after - before))
  if [[ $rc != 0 && $findings == 0 ]]; then findings=1; fi  # e.g. killed by the guard
  if [[ $findings != 0 ]]; then
    failed=1
    echo "== fuzz_$t: FINDING (exit $rc), log $log:" >&2
    grep -E "ERROR|SUMMARY|runtime error|property violated|Test unit written" "$log" | head -20 >&2
  fi
  rows+=("$(printf '%-18s %10s %9s %7s %6s %9s' "$t" "${execs:-?}" "${rate:-?}" "${added:-?}" \
    "${cov:-?}" "$findings")")
done
end=$(date +%s)

printf '%-18s %10s %9s %7s %6s %9s\n' target executions exec/s new cov findings
printf '%s\n' "${rows[@]}"
echo "# ${SECONDS_EACH} s per target; build $((built - start)) s, total $((end - start)) s"
if [[ $failed != 0 ]]; then
  echo "# FAILED: findings in $BUILD/fuzz-artifacts (reproduce: fuzz_<target> <file>)" >&2
  exit 1
fi
echo "# no findings"

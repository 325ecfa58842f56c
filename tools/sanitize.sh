#!/usr/bin/env bash
# Builds the tests with a sanitizer and runs them:
#   tools/sanitize.sh asan [ctest args...]   ASan+UBSan (preset asan, build-asan/): unit, multirank
#   tools/sanitize.sh tsan [ctest args...]   TSan (preset tsan, build-tsan/): unit, multirank, nccl
# A label in the ctest arguments (-L unit, -L 'unit|nccl') picks the suites; the unit suite
# alone builds only its own targets. Other arguments go to ctest as they are (-R Split, -j1).
# Every sanitizer report fails the run, even one whose process exit status a test does not
# look at (a rank expected to fail, a test passed by a regular expression): ctest keeps every
# test's output in BUILD/Testing/Temporary/LastTest.log, which is searched for reports.
# SHARC_JOBS (default 2): build and ctest parallelism. SHARC_SANITIZE_TIMEOUT (default 1800):
# ctest's timeout, in seconds, for a test that sets none (sanitized ranks are 2-20x slower).
# At the end it prints the slowest tests and every test that used more than half of its
# timeout (tools/sanitizers/margin.py): the margin a slower machine has.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
kind=${1:-}
case $kind in
  asan) suites_default="unit multirank" ;;
  tsan) suites_default="unit multirank nccl" ;;
  *) echo "usage: tools/sanitize.sh asan|tsan [ctest args...]" >&2; exit 2 ;;
esac
shift
build=$root/build-$kind
jobs=${SHARC_JOBS:-2}
supp=$root/tools/sanitizers

# The suites a label expression selects (ctest's -L/--label-regex is a regular expression).
label=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    -L | --label-regex) label=${args[i + 1]:-} ;;
    -L?*) label=${args[i]#-L} ;;
    --label-regex=*) label=${args[i]#*=} ;;
  esac
done
suites=()
for s in $suites_default; do
  if [[ -z $label || $s =~ $label ]]; then suites+=("$s"); fi
done
if [[ ${#suites[@]} -eq 0 ]]; then
  echo "sanitize.sh: -L '$label' selects none of the $kind suites ($suites_default)" >&2
  exit 2
fi
# The unit suite alone builds its own targets (CI's quick run); the others build everything,
# since their tests also run tools and drivers (sharc-perf, sharc-trace, ...).
targets=(all)
if [[ ${suites[*]} == unit ]]; then
  targets=(sharc_unit_tests sharc_topology_tests sharc-topo sharc_runtime_unit
           test_schedule_sim test_backtest test_plan sharc-plan sharc_launcher_tests sharc)
fi
label_re="^($(IFS='|'; echo "${suites[*]}"))\$"

configure_args=()
if command -v ccache >/dev/null; then
  configure_args=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# ASan: every executable keeps libpciaccess loaded for the whole process. hwloc's PCI plugin
# (hwloc_pci.so) keeps libpciaccess's device list in that library's globals, and hwloc unloads
# the plugin, and with it libpciaccess, when the last topology is destroyed: LSan then sees the
# list as leaked. Loaded from the start, the library stays and its globals still point to the
# list (nothing is reported), so LSan needs neither a suppression for it nor the slow unwinder
# that one needs to see hwloc's frames through the uninstrumented libraries (see lsan.supp).
if [[ $kind == asan ]]; then
  pciaccess=$(${CXX:-c++} -print-file-name=libpciaccess.so.0)
  if [[ -f $pciaccess ]]; then
    configure_args+=("-DCMAKE_EXE_LINKER_FLAGS=-Wl,--push-state,--no-as-needed,$pciaccess,--pop-state")
  fi
fi

start=$SECONDS
echo "==== configure (preset $kind) ===="
cmake --preset "$kind" "${configure_args[@]}"
echo "==== build (${targets[*]}, -j$jobs) ===="
cmake --build --preset "$kind" -j"$jobs" --target "${targets[@]}"
built=$SECONDS

# halt_on_error: the first report ends the process (and fails its test). The same options
# are in the asan/tsan test presets (ctest --preset asan|tsan).
if [[ $kind == asan ]]; then
  # The fast (frame-pointer) unwinder for the allocation stacks, ASan's default: the slow one
  # (fast_unwind_on_malloc=0) unwinds at every malloc, which the allocation-heavy planner
  # tests cannot afford (docs/faults.md, "Sanitizers"); the libpciaccess link above makes the
  # hwloc leak report it was kept for go away.
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:suppressions=$supp/asan.supp"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
else
  # die_after_fork=0: the test harness forks its ranks from a parent that may already run a
  # thread (the rendezvous server a UniqueId starts), and the ranks then start threads.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:suppressions=$supp/tsan.supp"
fi

echo "==== test (-L '$label_re' $*) ===="
status=0
default_timeout=${SHARC_SANITIZE_TIMEOUT:-1800}
junit=$build/Testing/sanitize-junit.xml
rm -f "$junit"
# The suites' label first: a -L among the arguments narrows it (ctest ANDs its -L options).
# The output sizes: LastTest.log keeps a passing test's output whole, not its first 1 KiB.
ctest --test-dir "$build" --output-on-failure -L "$label_re" \
  --timeout "$default_timeout" -j"$jobs" --output-junit "$junit" \
  --test-output-size-passed 100000000 --test-output-size-failed 100000000 "$@" || status=$?
tested=$SECONDS

# Each test's time against its timeout.
if [[ -s $junit ]] && command -v python3 >/dev/null; then
  echo "==== time against timeout ===="
  ctest --test-dir "$build" --show-only=json-v1 >"$build/Testing/sanitize-tests.json" &&
    python3 "$supp/margin.py" "$junit" "$build/Testing/sanitize-tests.json" "$default_timeout" ||
    true
fi

log=$build/Testing/Temporary/LastTest.log
pattern='^(==[0-9]+==ERROR: [A-Za-z]+Sanitizer|==[0-9]+==ThreadSanitizer: |(WARNING|FATAL): ThreadSanitizer|[^ ]+:[0-9]+:[0-9]+: runtime error: |SUMMARY: [A-Za-z]+Sanitizer)'
if [[ -f $log ]] && grep -Eq "$pattern" "$log"; then
  echo "==== sanitizer reports in $log ===="
  grep -En "$pattern" "$log" | head -n 40
  [[ $status -ne 0 ]] || status=1
fi
echo "sanitize.sh $kind: suites ${suites[*]}; build $((built - start)) s, tests" \
  "$((tested - built)) s, total $((SECONDS - start)) s; exit status $status"
exit "$status"

#!/usr/bin/env bash
# Runs every command that README.md shows in a ```sh block, so that the README cannot rot:
# each one verbatim where it is quick, in a short smoke form where the real one is long, or
# marked as covered elsewhere (with where) or not runnable here (with why). A README command
# this script does not know fails the check: add it to `check` below with its smoke form.
#
#   bash tools/readme-check.sh [--list]      # after a build (tools/test.sh runs it last)
#
# --list prints each command and how it is checked, without running anything.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
list=0
[[ ${1:-} == --list ]] && list=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# How each README command is checked: "run: CMD" (CMD is run; "same" = the command itself),
# "covered: WHERE" or "skip: WHY".
check() {
  case "$1" in
    "bash tools/run-perf.sh") echo "run: bash tools/run-perf.sh -e 1M -n 5 -w 1" ;;
    "bash tools/test.sh") echo "covered: CI's .ci/run is this command" ;;
    "bash tools/install-deps.sh" | "cmake --preset default" | "cmake --build --preset default -j2")
      echo "run: same" ;;
    "ctest --preset default") echo "covered: tools/test.sh runs it" ;;
    "cmake --install build --prefix /opt/sharc")
      echo "run: cmake --install build --prefix $tmp/prefix >/dev/null && test -f $tmp/prefix/lib/cmake/sharc/sharcConfig.cmake" ;;
    "python3 -m venv .venv && . .venv/bin/activate" | "pip install torch setuptools wheel ninja")
      echo "covered: tools/torch-venv.sh makes its venv the same way (python3 -m venv, then pip install torch and the build tools)" ;;
    "pip install --no-build-isolation ./plugin/torch")
      echo "covered: tools/torch-test.sh installs the package with it on both torch versions" ;;
    "bash tools/torch-venv.sh -- bash tools/torch-test.sh" | \
      "bash tools/torch-env.sh -- bash tools/torch-test.sh")
      echo "covered: tools/test.sh runs it" ;;
    "bash tools/torch-venv.sh -- python3 perf/torch_bench.py")
      echo "run: bash tools/torch-venv.sh -- python3 perf/torch_bench.py --smoke" ;;
    "bash tools/torch-env.sh -- python3 perf/torch_bench.py")
      echo "run: bash tools/torch-env.sh -- python3 perf/torch_bench.py --smoke" ;;
    "bash tools/torch-venv.sh -- python3 perf/torch_bench_fsdp2.py")
      echo "run: bash tools/torch-venv.sh -- python3 perf/torch_bench_fsdp2.py --smoke" ;;
    "bash tools/torch-venv.sh -- python3 tools/torch-distributed-suite.py --start-method fork")
      echo "run: bash tools/torch-venv.sh -- python3 tools/torch-distributed-suite.py --start-method fork --smoke" ;;
    "bash tools/torch-env.sh -- python3 tools/torch-distributed-suite.py --start-method fork")
      echo "run: bash tools/torch-env.sh -- python3 tools/torch-distributed-suite.py --start-method fork --smoke" ;;
    "cmake --preset default && cmake --build build --target nccl-net-sharc -j") echo "run: same" ;;
    export\ *) echo "skip: sets the environment of the user's job on the next lines" ;;
    "torchrun ... train.py") echo "skip: the user's own training job" ;;
    "bash tools/hang-demo.sh") echo "run: same >/dev/null" ;;
    "sharc-trace /shared/sharc-traces" | "kill -USR1 <pid of every rank>" | \
      "sharc-trace --live /tmp/sharc-sockets")
      echo "covered: tests/trace/test_real_hangs.py (CTest sharc_trace_real_hangs) dumps, signals and serves records of real ranks and runs sharc-trace on them" ;;
    "ctest --test-dir build -R 'Abort|CApi' --output-on-failure" | \
      "ctest --test-dir build -R 'NetClose|CollNetClose' --output-on-failure" | \
      "ctest --test-dir build -R 'FaultPlan'" | "ctest --test-dir build -R 'FaultInjection|faults'")
      echo "covered: tools/test.sh's ctest runs these tests" ;;
    "bash tools/torch-venv.sh -- bash tools/torch-test.sh -k 'abort or shutdown'")
      echo "covered: tools/test.sh runs the whole torch suite on both versions" ;;
    "tools/fault-campaign.sh --perf build/perf/sharc-perf --trials 50 --seed 13" | \
      "tools/fault-campaign.sh --perf build/perf/sharc-perf --cluster 2x2 --trials 50" | \
      "tools/fault-campaign.sh --perf build/perf/sharc-perf --cluster 3x2 --trials 50")
      echo "skip: 10-25 minutes each (the README has their tables); CTest faults.campaign.short runs the short form" ;;
    "tools/fault-campaign.sh --perf build/perf/sharc-perf --trials 2 --seed 1")
      echo "covered: CTest faults.campaign.short is this command" ;;
    "tools/fuzz.sh") echo "covered: tools/test.sh runs tools/fuzz.sh -t 10" ;;
    "tools/sanitize.sh asan -L unit") echo "covered: tools/test.sh runs it" ;;
    "tools/sanitize.sh asan" | "tools/sanitize.sh tsan" | "tools/sanitize.sh tsan -L nccl -R CollNet")
      echo "skip: 20-40 minutes each on 2 cores (run by hand; the note of issue 13 has the results)" ;;
    "tools/fuzz.sh -t 60 shm_fifo") echo "run: tools/fuzz.sh --no-build -t 2 shm_fifo >/dev/null" ;;
    "tools/fuzz.sh --list") echo "run: same >/dev/null" ;;
    "tools/fuzz.sh --seed") echo "skip: rewrites the committed seed corpora (tests/fuzz/corpus)" ;;
    "mpirun -np 16 -x LD_LIBRARY_PATH -x NCCL_NET_PLUGIN ./my_nccl_program")
      echo "skip: the user's own NCCL program on 16 ranks (tools/nccl-e2e.sh runs NCCL with the plugin where a GPU exists)" ;;
    "build/tools/sharc-topo" | "build/tools/sharc-topo --topo tests/data/topo/p4d-like.xml --local-ranks 8 --json")
      echo "run: same >/dev/null" ;;
    "mpirun -np 2 build/perf/sharc-perf --calibrate /tmp/sharc.tuner")
      echo "run: mpirun --allow-run-as-root -np 2 build/perf/sharc-perf --calibrate $tmp/sharc.tuner" ;;
    "tools/emulate-cluster.sh --nodes 2,2 -- build/perf/sharc-perf --calibrate /tmp/sharc.tuner")
      if [[ $(id -u) -eq 0 ]]; then
        echo "run: tools/emulate-cluster.sh --nodes 2,2 -- build/perf/sharc-perf --calibrate $tmp/cluster.tuner"
      else
        echo "skip: needs root (network namespaces)"
      fi ;;
    "SHARC_TUNER_FILE=/tmp/sharc.tuner mpirun -np 4 build/perf/sharc-perf all_gather -b 1K -e 64M -f 4 --explain")
      echo "run: SHARC_TUNER_FILE=$tmp/sharc.tuner mpirun --allow-run-as-root --oversubscribe -np 4 build/perf/sharc-perf all_gather -b 1K -e 1M -f 4 -n 5 -w 1 --explain" ;;
    'COLLS="all_gather reduce_scatter all_reduce" bash tools/compare-mpi.sh 5 2 4')
      echo "run: COLLS=all_gather bash tools/compare-mpi.sh 1 2" ;;
    "build/tools/sharc-plan collective --cluster p5.48xlarge --collective all_gather --nodes 64 -b 1M -e 16G -f 4" | \
      "build/tools/sharc-plan fsdp --model llama2-70b --cluster p5.48xlarge --nodes 64 | head -12")
      echo "run: same" ;;
    "build/tools/sharc-plan collective --cluster p5.48xlarge --collective all_gather --nodes 2,8,64,256,1024 -b 1M -e 16G --plot plan-p5.png")
      echo "run: build/tools/sharc-plan collective --cluster p5.48xlarge --collective all_gather --nodes 2,8,64,256,1024 -b 1M -e 16G --plot $tmp/plan-p5.png >/dev/null" ;;
    "SHARC_TUNER_SAVE=/tmp/learned.txt SHARC_DEBUG=INFO build/perf/sharc-perf reduce_scatter -N 2 -b 64M -e 64M -n 100 -w 5")
      echo "run: SHARC_TUNER_SAVE=$tmp/learned.txt SHARC_TUNER_LEARN_AFTER=4 build/perf/sharc-perf reduce_scatter -N 2 -b 1M -e 1M -n 40 -w 1 >/dev/null" ;;
    "SHARC_TUNER_FILE=/tmp/learned.txt build/perf/sharc-perf reduce_scatter -N 2 -b 64M -e 64M -n 20 -w 5")
      echo "run: SHARC_TUNER_FILE=$tmp/learned.txt build/perf/sharc-perf reduce_scatter -N 2 -b 1M -e 1M -n 5 -w 1 >/dev/null" ;;
    "cat /tmp/learned.txt") echo "run: grep -q '^choice\\.reducescatter\\.' $tmp/learned.txt" ;;
    *) echo "unknown" ;;
  esac
}

# The README's commands: the lines of its ```sh blocks, comments and blank lines dropped.
mapfile -t commands < <(awk '/^```sh/{f=1;next} /^```/{f=0} f' README.md |
  sed -e 's/[[:space:]]\+#.*$//' -e 's/[[:space:]]*$//' | grep -v '^$')

ran=0 failed=0 unknown=0 other=0
for cmd in "${commands[@]}"; do
  how=$(check "$cmd")
  if [[ $list -eq 1 || $how != run:* ]]; then
    printf '%-10s %s\n' "${how%%:*}" "$cmd"
    [[ $how == unknown ]] && { unknown=$((unknown + 1)); echo "           ^ README command without a check in $0"; }
    [[ $how == covered:* || $how == skip:* ]] && { other=$((other + 1)); echo "           (${how#*: })"; }
    continue
  fi
  smoke=${how#run: }
  [[ $smoke == same* ]] && smoke="$cmd${smoke#same}"
  echo "==== readme-check: $smoke"
  start=$SECONDS
  if bash -c "$smoke" >"$tmp/out" 2>&1; then
    ran=$((ran + 1))
    echo "ok (${cmd}) in $((SECONDS - start)) s"
  else
    failed=$((failed + 1))
    tail -n 30 "$tmp/out"
    echo "FAILED (${cmd}) in $((SECONDS - start)) s"
  fi
done
[[ $list -eq 1 ]] && exit 0
echo "readme-check: ${#commands[@]} README commands: $ran ran, $failed failed, $other covered" \
  "elsewhere or skipped, $unknown without a check"
[[ $failed -eq 0 && $unknown -eq 0 ]]

#!/usr/bin/env bash
# Runs every command that README.md and the pages under docs/ show in a ```sh block, so that
# the documentation cannot rot: each one verbatim where it is quick, in a short smoke form
# where the real one is long, or marked as covered elsewhere (with where) or not runnable here
# (with why). A command this script does not know fails the check: add it to `check` below
# with its smoke form. A command shown on several pages is checked once.
#
#   bash tools/readme-check.sh [--list]      # after a build (tools/test.sh runs it last)
#
# --list prints each page's commands and how each is checked, without running anything (no
# build needed); it fails, as the full check does, when a command has no entry in `check`.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
list=0
[[ ${1:-} == --list ]] && list=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# How each documented command is checked: "run: CMD" (CMD is run; "same" = the command itself),
# "covered: WHERE" or "skip: WHY".
# The check of a command that needs root (network namespaces): run it as root, else skip.
root_run() {
  if [[ $(id -u) -eq 0 ]]; then echo "run: $1"; else echo "skip: needs root (network namespaces)"; fi
}

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
    "GLIBC_TUNABLES=glibc.malloc.trim_threshold=4000000000 build/perf/sharc_bench_schedule_build --benchmark_repetitions=5 --benchmark_report_aggregates_only=true")
      echo "run: build/perf/sharc_bench_schedule_build --benchmark_filter=nodes:64/MiB:256/ --benchmark_min_time=0.01 >/dev/null" ;;
    "FI_TCP_IFACE=lo SHARC_FI_PROVIDER='tcp;ofi_rxm' build/perf/sharc-create-bench -N 8,16,32,64,128 -r 1")
      echo "run: FI_TCP_IFACE=lo SHARC_FI_PROVIDER='tcp;ofi_rxm' build/perf/sharc-create-bench -N 3 -r 1 >/dev/null" ;;
    "build/perf/sharc-create-bench --bootstrap -N 8,16,32,64,128,256,512,1024 -r 3")
      echo "run: build/perf/sharc-create-bench --bootstrap -N 8,64 -r 1 >/dev/null" ;;
    "sharc-trace /shared/sharc-traces" | "kill -USR1 <pid of every rank>" | \
      "sharc-trace --live /tmp/sharc-sockets")
      echo "covered: tests/trace/test_real_hangs.py (CTest sharc_trace_real_hangs) dumps, signals and serves records of real ranks and runs sharc-trace on them" ;;
    "ctest --test-dir build -R 'Abort|CApi' --output-on-failure" | \
      "ctest --test-dir build -R 'NetClose|CollNetClose' --output-on-failure" | \
      "ctest --test-dir build -R 'FaultPlan'" | "ctest --test-dir build -R 'FaultInjection|faults'" | \
      "ctest --test-dir build -R 'Shrink' --output-on-failure")
      echo "covered: tools/test.sh's ctest runs these tests" ;;
    "bash tools/torch-venv.sh -- bash tools/torch-test.sh -k 'abort or shutdown'" | \
      "bash tools/torch-venv.sh -- bash tools/torch-test.sh -k shrink")
      echo "covered: tools/test.sh runs the whole torch suite on both versions" ;;
    "tools/fault-campaign.sh --perf build/perf/sharc-perf --trials 50 --seed 13" | \
      "tools/fault-campaign.sh --perf build/perf/sharc-perf --cluster 2x2 --trials 50" | \
      "tools/fault-campaign.sh --perf build/perf/sharc-perf --cluster 3x2 --trials 50")
      echo "skip: 10-25 minutes each (docs/measurements.md has their results); CTest faults.campaign.short runs the short form" ;;
    "tools/fault-campaign.sh --perf build/perf/sharc-perf --trials 2 --seed 1")
      echo "covered: CTest faults.campaign.short is this command" ;;
    "tools/fuzz.sh") echo "covered: tools/test.sh runs tools/fuzz.sh -t 10" ;;
    "tools/sanitize.sh asan -L unit") echo "covered: tools/test.sh runs it" ;;
    "tools/sanitize.sh asan" | "tools/sanitize.sh tsan" | "tools/sanitize.sh tsan -L nccl -R CollNet")
      echo "skip: 20-40 minutes each on 2 cores (run by hand)" ;;
    "tools/fuzz.sh -t 60 shm_fifo") echo "run: tools/fuzz.sh --no-build -t 2 shm_fifo >/dev/null" ;;
    "tools/fuzz.sh --list") echo "run: same >/dev/null" ;;
    "tools/fuzz.sh --seed") echo "skip: rewrites the committed seed corpora (tests/fuzz/corpus)" ;;
    "mpirun -np 16 -x LD_LIBRARY_PATH -x NCCL_NET_PLUGIN ./my_nccl_program")
      echo "skip: the user's own NCCL program on 16 ranks (tools/nccl-e2e.sh runs NCCL with the plugin where a GPU exists)" ;;
    "build/tools/sharc-topo" | "build/tools/sharc-topo --topo tests/data/topo/p4d-like.xml --local-ranks 8 --json")
      echo "run: same >/dev/null" ;;
    "SHARC_DEVICE_PATH=direct build/perf/sharc-perf all_gather -N 2 -b 1M -e 64M -f 8 -n 10 -w 2" | \
      "SHARC_DEVICE_PATH=host build/perf/sharc-perf all_gather -N 2 -b 1M -e 64M -f 8 -n 10 -w 2" | \
      "SHARC_DEVICE_PATH=direct build/perf/sharc-perf reduce_scatter -N 2 -b 1M -e 64M -f 8 -n 10 -w 2" | \
      "SHARC_DEVICE_PATH=host build/perf/sharc-perf reduce_scatter -N 2 -b 1M -e 64M -f 8 -n 10 -w 2")
      echo "run: FI_TCP_IFACE=lo SHARC_SHM=0 SHARC_FI_PROVIDER=shm ${1%% -b *} -b 1M -e 1M -n 3 -w 1" ;;
    "mpirun -np 2 build/perf/sharc-perf --calibrate /tmp/sharc.tuner")
      echo "run: mpirun --allow-run-as-root -np 2 build/perf/sharc-perf --calibrate $tmp/sharc.tuner" ;;
    "tools/emulate-cluster.sh --nodes 2,2 -- build/perf/sharc-perf --calibrate /tmp/sharc.tuner")
      root_run "tools/emulate-cluster.sh --nodes 2,2 -- build/perf/sharc-perf --calibrate $tmp/cluster.tuner" ;;
    "SHARC_TUNER_FILE=/tmp/sharc.tuner mpirun -np 4 build/perf/sharc-perf all_gather -b 1K -e 64M -f 4 --explain")
      echo "run: SHARC_TUNER_FILE=$tmp/sharc.tuner mpirun --allow-run-as-root --oversubscribe -np 4 build/perf/sharc-perf all_gather -b 1K -e 1M -f 4 -n 5 -w 1 --explain" ;;
    "MIN_BYTES=1M MAX_BYTES=64M ROUNDS=15 bash tools/perf-ab.sh 9c7cffe HEAD")
      echo "run: SHARC_AB_DIR=$tmp/ab MIN_BYTES=1K MAX_BYTES=4K ROUNDS=1 COLLS=all_gather bash tools/perf-ab.sh HEAD HEAD >/dev/null" ;;
    "MIN_BYTES=1M MAX_BYTES=64M ROUNDS=7 bash tools/perf-ab.sh 1d88291 5ebfe46" | \
      "COLLS=reduce_scatter SHARC_ALGO=hierarchical_bruck NODES=2,2,2,2 RATE=2gbit MIN_BYTES=1M MAX_BYTES=64M ROUNDS=5 bash tools/perf-ab.sh c858168 b535771" | \
      "COLLS=\"reduce_scatter all_reduce\" MIN_BYTES=1M MAX_BYTES=64M ROUNDS=5 bash tools/perf-ab.sh 7cf75ac 69aff74" | \
      "COLLS=reduce_scatter SHARC_ALGO=hierarchical_bruck NODES=2,2,2,2 RATE=2gbit MIN_BYTES=1M MAX_BYTES=64M ROUNDS=5 bash tools/perf-ab.sh 7cf75ac 69aff74" | \
      "COLLS=\"all_gather reduce_scatter all_reduce\" MIN_BYTES=1M MAX_BYTES=64M ROUNDS=5 bash tools/perf-ab.sh 7cf41be b565f76" | \
      "COLLS=reduce_scatter SHARC_ALGO=hierarchical_bruck NODES=2,2,2,2 RATE=2gbit MIN_BYTES=1M MAX_BYTES=64M ROUNDS=5 bash tools/perf-ab.sh 7cf41be b565f76" | \
      "ROUNDS=5 RANKS=4 MIN_BYTES=4K MAX_BYTES=16M bash tools/perf-ab.sh e3939aa 342c851")
      echo "covered: the same script as the perf-ab.sh 9c7cffe HEAD line (two builds and 4 minutes or more)" ;;
    "SHARC_ALGO=hierarchical_bruck NODES=2,2 RATE=2gbit MIN_BYTES=1M MAX_BYTES=64M ROUNDS=7 bash tools/perf-ab.sh 26146b7 846b176")
      root_run "SHARC_AB_DIR=$tmp/ab NODES=1,1 MIN_BYTES=1K MAX_BYTES=4K ROUNDS=1 COLLS=all_gather bash tools/perf-ab.sh HEAD HEAD >/dev/null" ;;
    'COLLS="all_gather reduce_scatter all_reduce" bash tools/compare-mpi.sh 5 2 4')
      echo "run: COLLS=all_gather bash tools/compare-mpi.sh 1 2" ;;
    "build/tools/sharc-plan collective --cluster p5.48xlarge --collective all_gather --nodes 64 -b 1M -e 16G -f 4" | \
      "build/tools/sharc-plan fsdp --model llama2-70b --cluster p5.48xlarge --nodes 64 | head -12")
      echo "run: same" ;;
    "build/tools/sharc-plan collective --cluster p5.48xlarge --collective all_gather --nodes 8 -b 32M -e 2G")
      echo "run: build/tools/sharc-plan collective --cluster p5.48xlarge --collective all_gather --nodes 8 -b 32M -e 2G | grep -q 'staged_bw.*nccl_bw'" ;;
    "build/tools/sharc-plan collective --cluster p5.48xlarge --collective all_gather --nodes 2,8,64,256,1024 -b 1M -e 16G --plot plan-p5.png")
      echo "run: build/tools/sharc-plan collective --cluster p5.48xlarge --collective all_gather --nodes 2,8,64,256,1024 -b 1M -e 16G --plot $tmp/plan-p5.png >/dev/null" ;;
    "SHARC_TUNER_SAVE=/tmp/learned.txt SHARC_DEBUG=INFO build/perf/sharc-perf reduce_scatter -N 2 -b 64M -e 64M -n 100 -w 5")
      echo "run: SHARC_TUNER_SAVE=$tmp/learned.txt SHARC_TUNER_LEARN_AFTER=4 build/perf/sharc-perf reduce_scatter -N 2 -b 1M -e 1M -n 40 -w 1 >/dev/null" ;;
    "SHARC_TUNER_FILE=/tmp/learned.txt build/perf/sharc-perf reduce_scatter -N 2 -b 64M -e 64M -n 20 -w 5")
      echo "run: SHARC_TUNER_FILE=$tmp/learned.txt build/perf/sharc-perf reduce_scatter -N 2 -b 1M -e 1M -n 5 -w 1 >/dev/null" ;;
    "cat /tmp/learned.txt") echo "run: grep -q '^choice\\.reducescatter\\.' $tmp/learned.txt" ;;
    "build/tools/sharc-plan simulate --cluster p5.48xlarge --collective all_gather --nodes 2,4,16 -b 1M -e 1G -f 8")
      echo "run: build/tools/sharc-plan simulate --cluster p5.48xlarge --collective all_gather --nodes 2 -b 1M -e 1M >/dev/null" ;;
    "bash tools/plan-table.sh build docs")
      echo "run: bash tools/plan-table.sh build | grep -q '^| p4d.24xlarge | reduce_scatter | 1024 |'" ;;
    "build/tools/sharc-plan cluster --cluster p5.48xlarge > my-p5.txt")
      echo "run: build/tools/sharc-plan cluster --cluster p5.48xlarge >$tmp/my-p5.txt && build/tools/sharc-plan collective --cluster-file $tmp/my-p5.txt --collective all_gather --nodes 2 -b 1M -e 1M >/dev/null" ;;
    "build/tools/sharc-plan backtest")  # exits 1 while a published point is outside its bound
      echo "run: build/tools/sharc-plan backtest >$tmp/backtest; [[ \$? -le 1 ]] && grep -q '^ *p5.48xlarge' $tmp/backtest" ;;
    "build/tests/plan/test_schedule_sim")
      echo "covered: tools/test.sh's ctest runs these cases (plan.ScheduleSim.*)" ;;
    "build/tests/plan/test_schedule_sim --table --quick" | \
      "build/tests/plan/test_schedule_sim --table --layout 8+4 --algorithm hierarchical --collective all_reduce --min-bytes 16")
      echo "run: same >/dev/null" ;;
    "build/tools/sharc-plan simulate --cluster p5.48xlarge --collective all_gather --nodes 256 -b 32M -e 2G -f 4" | \
      "build/tools/sharc-plan simulate --cluster p5.48xlarge --collective reduce_scatter --nodes 256 -b 32M -e 2G -f 4")
      echo "covered: 3-9 minutes on 2 cores (docs/planning.md has its table); CTest plan.ScheduleSimScale.ModelAgreesAt2048Ranks replays 256 nodes at 32 MiB" ;;
    "build/tools/sharc-plan simulate --cluster p5.48xlarge --collective reduce_scatter --nodes 2,4,8,16,32,64,128 -b 32M -e 2G -f 4" | \
      "build/tools/sharc-plan simulate --cluster p4d.24xlarge --collective reduce_scatter --nodes 2,4,8,16,32,64 -b 32M -e 2G -f 4" | \
      "build/tools/sharc-plan simulate --cluster p5.48xlarge --collective all_gather --nodes 8,16,32,64,128 -b 32M -e 2G -f 4")
      echo "covered: 1-6 minutes on 2 cores (docs/replay-scale.md has its table); CTest plan.ScheduleSimScale.ModelAgreesOnTableRows replays these rows at 2-16 nodes and 32 nodes (128 MiB)" ;;
    "build/tools/sharc-plan simulate --cluster p5.48xlarge --collective reduce_scatter --nodes 8,64,256,1024 -b 256M -e 256M --fabric" | \
      "build/tools/sharc-plan simulate --cluster p5.48xlarge --collective all_gather --nodes 8,64,256,1024 -b 256M -e 256M --fabric")
      echo "run: build/tools/sharc-plan simulate --cluster p5.48xlarge --collective reduce_scatter --nodes 8 -b 256M -e 256M --fabric >/dev/null" ;;
    "build/tools/sharc-plan simulate --cluster p5.48xlarge --collective all_gather --nodes 512,1024 -b 32M -e 512M -f 2" | \
      "build/tools/sharc-plan simulate --cluster p5.48xlarge --collective reduce_scatter --nodes 512,1024 -b 32M -e 512M -f 2")
      echo "skip: 1-4 minutes and up to 3.6 GB at 4,096-8,192 ranks (docs/replay-scale.md has its table); test_sharc_plan_cli.sh checks the CLI's rank and operation caps" ;;
    "build/tools/sharc-plan simulate --cluster p5.48xlarge --collective all_gather --nodes 256 -b 128M -e 128M")
      echo "skip: about 40 s and 1 GB at 2,048 ranks; CTest plan.ScheduleSimScale.* replays up to 512 ranks hierarchical" ;;
    "build/tests/plan/test_schedule_sim --table")
      echo "skip: the whole sweep, 15-21 minutes on 2 cores (docs/planning.md has its table)" ;;
    "SHARC_SHM=0 SHARC_ALGO=ring SHARC_CHUNK_BYTES=65536 SHARC_TIMEOUT_MS=10000 build/perf/sharc-perf all_reduce -b 32M -e 32M -N 4 -n 1 -w 0 -c 1")
      echo "covered: CTest perf.ring_all_reduce_many_chunks is this command" ;;
    "tools/validate-model.sh build /tmp/sharc-validate")
      echo "skip: root and ~9 minutes; CTest cluster.model.validate (label cluster) runs its short form" ;;
    "tools/emulate-cluster.sh --nodes 3,1 --rate 200mbit -- build/perf/sharc-perf all_gather -b 64K -e 16M -f 4 -n 5 -w 3 -c 0 --median --explain")
      echo "covered: CTest cluster.model.validate runs these cases on the emulated cluster (root)" ;;
    "perf/speed-targets.sh 3")
      echo "skip: root (an emulated 2x2 cluster) and every target 3 times against Open MPI and memcpy; CTest perf.smoke.* runs sharc-perf" ;;
    "bash tools/torch-venv.sh -- python3 perf/torch_bench.py --skip-fsdp --json /tmp/torch-bench-1.json")
      echo "covered: the smoke form of 'bash tools/torch-venv.sh -- python3 perf/torch_bench.py' runs the same script" ;;
    "build/perf/sharc-net-perf -b 1M -e 64M -f 2 --reps 5" | "build/perf/sharc-net-perf -b 8 -e 64K -f 8 --reps 5")
      echo "covered: CTest perf.net_plugin.* runs sharc-net-perf over tcp and shm" ;;
    "ctest --test-dir build -L speed -V")
      echo "skip: a timing check of several minutes (label speed), which the default preset and CI leave out" ;;
    "tools/fault-campaign.sh --perf build/perf/sharc-perf --classes kill,drop,fail --trials 20 --seed 77" | \
      "tools/fault-campaign.sh --perf build/perf/sharc-perf --cluster 3x2 --trials 15 --seed 91")
      echo "skip: minutes each (docs/measurements.md has their tables); CTest faults.campaign.short runs the short form" ;;
    "tools/soak.sh" | "tools/soak.sh 2" | \
      "build/tests/soak/sharc_soak --ranks 4 --small 20000 --large 200 --split-every 100")
      echo "skip: long soaks (20,000 to 100,000 collectives per run); CTest soak.short.shm0/shm1 run the short form" ;;
    "ctest --test-dir build -L soak") echo "covered: tools/test.sh's ctest runs the soak label" ;;
    "bash tools/gpu-check.sh --prepare")
      echo "skip: downloads Debian packages into .gpu-deps/ for a GPU machine" ;;
    "bash tools/gpu-check.sh")
      echo "skip: builds for sm_90 and runs the GPU tests: a GPU machine only (CTest label gpu skips without one)" ;;
    "tools/emulate-cluster.sh --nodes 2,2 -- build/perf/sharc-perf all_gather -b 1M -e 64M -f 4")
      echo "covered: CTest label cluster runs sharc-perf through this script (2+2, 2+2+2, 3+2; root)" ;;
    *) echo "unknown" ;;
  esac
}

# The pages: README.md, then docs/*.md and docs/dev/*.md in name order.
pages=(README.md)
for f in docs/*.md docs/dev/*.md; do [[ -f $f ]] && pages+=("$f"); done

# Each page's commands: the lines of its ```sh blocks, comment lines, trailing comments and
# blank lines dropped; stored as "page<TAB>command".
entries=()
for page in "${pages[@]}"; do
  while IFS= read -r cmd; do entries+=("$page"$'\t'"$cmd"); done < <(
    awk '/^```sh[[:space:]]*$/{f=1;next} /^```/{f=0} f' "$page" |
      sed -e 's/^[[:space:]]*#.*$//' -e 's/[[:space:]]\+#.*$//' -e 's/[[:space:]]*$//' |
      grep -v '^$')
done

declare -A seen=()
ran=0 failed=0 unknown=0 other=0 repeats=0
for entry in "${entries[@]}"; do
  page=${entry%%$'\t'*}
  cmd=${entry#*$'\t'}
  how=$(check "$cmd")
  if [[ -n ${seen[$cmd]:-} ]]; then
    repeats=$((repeats + 1))
    [[ $list -eq 1 ]] && printf '%-10s %s: %s\n           (checked above, %s)\n' "${how%%:*}" "$page" "$cmd" "${seen[$cmd]}"
    continue
  fi
  seen[$cmd]=$page
  if [[ $list -eq 1 || $how != run:* ]]; then
    printf '%-10s %s: %s\n' "${how%%:*}" "$page" "$cmd"
    [[ $how == unknown ]] && { unknown=$((unknown + 1)); echo "           ^ a command of $page without a check in $0"; }
    [[ $how == covered:* || $how == skip:* ]] && { other=$((other + 1)); echo "           (${how#*: })"; }
    continue
  fi
  smoke=${how#run: }
  [[ $smoke == same* ]] && smoke="$cmd${smoke#same}"
  echo "==== readme-check ($page): $smoke"
  start=$SECONDS
  if bash -c "$smoke" >"$tmp/out" 2>&1; then
    ran=$((ran + 1))
    echo "ok (${cmd}) in $((SECONDS - start)) s"
  else
    failed=$((failed + 1))
    tail -n 30 "$tmp/out"
    echo "FAILED ($page: ${cmd}) in $((SECONDS - start)) s"
  fi
done
if [[ $list -eq 1 ]]; then
  echo "readme-check --list: ${#entries[@]} commands on ${#pages[@]} pages, ${#seen[@]} distinct," \
    "$unknown without a check"
  [[ $unknown -eq 0 ]]
  exit
fi
echo "readme-check: ${#entries[@]} commands on ${#pages[@]} pages (${repeats} repeated):" \
  "$ran ran, $failed failed, $other covered elsewhere or skipped, $unknown without a check"
[[ $failed -eq 0 && $unknown -eq 0 ]]

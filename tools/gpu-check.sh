#!/usr/bin/env bash
# Everything sharc checks on a GPU, in one run (built to finish within 8 minutes on an H200):
# builds for sm_90, runs the GPU tests (CTest label `gpu`: kernels, stream-ordered
# collectives among processes sharing the GPU), the GPU benchmarks (reduction kernels against
# the device copy bandwidth; AllGather/ReduceScatter among 4 processes, 256 MiB), the torch
# backend with CUDA tensors (tests/torch/test_cuda.py, where torch has CUDA) and unmodified
# NCCL over sharc's network plugin (tools/nccl-e2e.sh, where NCCL is found). Writes every
# log and a summary table (summary.md) to OUTDIR.
#
#   bash tools/gpu-check.sh --prepare   # on a Debian 12 machine with its package registry:
#                                       # fetches the .debs a bare GPU machine lacks into
#                                       # .gpu-deps/ (libfabric, hwloc, GoogleTest, pkgconf)
#   bash tools/gpu-check.sh [OUTDIR]    # on the GPU machine (OUTDIR: $OUT, else gpu-check-out)
#
# Where libfabric, hwloc or GoogleTest are missing (or SHARC_GPU_CHECK_CARRIED=1), the .debs
# from .gpu-deps/ are unpacked into a private prefix (never into /). Steps that cannot run say
# why in the table; the exit status is 1 when a step failed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
deps_dir="$root/.gpu-deps"

if [[ ${1:-} == --prepare ]]; then
  # The packages and what they need at run time that a CUDA image usually lacks.
  pkgs=(libfabric1 libfabric-dev libhwloc15 libhwloc-dev libgtest-dev libgmock-dev
        libibverbs1 ibverbs-providers librdmacm1 libpsm-infinipath1 libpsm2-2 libnl-3-200
        libnl-route-3-200 libnuma1 libnuma-dev libltdl7 libltdl-dev libudev1 pkgconf
        pkgconf-bin libpkgconf3)
  mkdir -p "$deps_dir"
  (cd "$deps_dir" && apt-get download "${pkgs[@]}") || { echo "gpu-check: apt-get download failed"; exit 1; }
  grep -qxF '/.gpu-deps/' .git/info/exclude 2>/dev/null || echo '/.gpu-deps/' >>.git/info/exclude
  du -sh "$deps_dir"
  echo "gpu-check: .gpu-deps ready; carry it to the GPU machine with the tree"
  exit 0
fi

dest=${1:-${OUT:-$root/gpu-check-out}}
mkdir -p "$dest"
summary="$dest/summary.md"
# Step logs collect here and end up in one file, DEST/logs.txt (few files travel back well).
out=$(mktemp -d /tmp/sharc-gpu-check.XXXXXX)
start=$(date +%s)
rows=()
row() { rows+=("| $1 | $2 | $3 | $4 |"); echo "gpu-check: $1: $2 ($3 s) $4"; }
# A step's result from its exit status (77: the program found no GPU and skipped).
result() {
  case $step_rc in
    0) echo ok ;;
    77) echo "skipped (no GPU)" ;;
    124 | 137) echo "FAILED (timed out)" ;;
    *) echo "FAILED (exit $step_rc)" ;;
  esac
}

# Runs one step with a time limit; its whole output goes to OUTDIR/<name>.log.
# Sets step_rc and step_secs.
run_step() {
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  step_rc=$?
  step_secs=$(($(date +%s) - t0))
}

# ---- GPU and toolchain ---------------------------------------------------------------------
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  nvcc --version | tail -2; cmake --version | head -1; } >"$out/machine.log" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
row "machine" "${gpu:-no GPU found}" 0 "$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'no nvcc')"

# ---- dependencies: the system's, else the carried .debs -------------------------------------
have_system_deps() {
  [[ ${SHARC_GPU_CHECK_CARRIED:-0} == 1 ]] && return 1  # test the carried path anyway
  command -v pkg-config >/dev/null && pkg-config --exists libfabric hwloc &&
    { [[ -f /usr/include/gtest/gtest.h ]] || [[ -f /usr/local/include/gtest/gtest.h ]]; }
}
if ! have_system_deps; then
  prefix=/tmp/sharc-gpu-deps
  if ! ls "$deps_dir"/*.deb >/dev/null 2>&1; then
    row "dependencies" "FAILED" 0 "libfabric/hwloc/GoogleTest missing and no .gpu-deps/ (run --prepare where Debian's registry is reachable)"
    printf '%s\n' "| step | result | seconds | details |" "| --- | --- | --- | --- |" "${rows[@]}" >"$summary"
    cat "$out"/*.log >"$dest/logs.txt"
    cat "$summary"
    exit 1
  fi
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in "$deps_dir"/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
  lib="$prefix/usr/lib/x86_64-linux-gnu"
  # The .pc files say prefix=/usr: the sysroot variable moves their paths into the prefix.
  export PATH="$prefix/usr/bin:$PATH"
  export PKG_CONFIG_PATH="$lib/pkgconfig:$prefix/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$prefix"
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LDFLAGS="-Wl,-rpath-link,$lib ${LDFLAGS:-}"
  export CPATH="$prefix/usr/include${CPATH:+:$CPATH}"
  row "dependencies" "carried" 0 "$(ls "$deps_dir"/*.deb | wc -l) .debs unpacked into $prefix"
else
  row "dependencies" "system" 0 "libfabric $(pkg-config --modversion libfabric), hwloc $(pkg-config --modversion hwloc)"
fi
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo} SHARC_SOCKET_IFNAME=${SHARC_SOCKET_IFNAME:-lo}
jobs=$(nproc)

# NCCL for the end-to-end test: the CUDA toolkit's, else the one pip installed for torch.
nccl_args=()
if ! ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h >/dev/null 2>&1; then
  nccl_dir=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [[ -n $nccl_dir && -f $nccl_dir/include/nccl.h ]]; then
    nccl_lib=$(ls "$nccl_dir"/lib/libnccl.so* 2>/dev/null | head -1)
    nccl_args=(-DSHARC_NCCL_INCLUDE="$nccl_dir/include" -DSHARC_NCCL_LIBRARY="$nccl_lib")
    export LD_LIBRARY_PATH="$nccl_dir/lib:${LD_LIBRARY_PATH:-}"
  fi
fi

# ---- build for sm_90 -------------------------------------------------------------------------
build="$root/build-gpu"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
run_step configure 300 cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DSHARC_WITH_CUDA=ON -DSHARC_WITH_MPI=OFF \
  -DSHARC_BUILD_BENCHMARKS=OFF "${nccl_args[@]}"
if [[ $step_rc -ne 0 ]]; then
  row "configure" "FAILED" "$step_secs" "see configure.log: $(grep -m1 -i 'error' "$out/configure.log")"
else
  row "configure" "ok" "$step_secs" "sm_90, Release"
  targets=(sharc sharc_gpu_kernel_tests sharc_gpu_collective_tests sharc_multirank_tests
           sharc-gpu-kernel-bench sharc-gpu-perf nccl-net-sharc)
  grep -q sharc_nccl_e2e "$build"/build.ninja "$build"/Makefile 2>/dev/null && targets+=(sharc_nccl_e2e)
  run_step build 420 cmake --build "$build" -j"$jobs" --target "${targets[@]}"
  if [[ $step_rc -ne 0 ]]; then
    row "build" "FAILED" "$step_secs" "see build.log: $(grep -m1 -E 'error|Error' "$out/build.log")"
  else
    row "build" "ok" "$step_secs" "${targets[*]}"
  fi
fi

# ---- tests and benchmarks --------------------------------------------------------------------
gtest_row() {  # name, log: gtest's own counts
  local passed failed skipped
  passed=$(grep -oE '\[  PASSED  \] [0-9]+' "$out/$2" | grep -oE '[0-9]+$' || echo 0)
  failed=$(grep -oE '\[  FAILED  \] [0-9]+ test' "$out/$2" | grep -oE '[0-9]+' || echo 0)
  skipped=$(grep -oE '\[  SKIPPED \] [0-9]+' "$out/$2" | grep -oE '[0-9]+$' || echo 0)
  row "$1" "$(result)" "$step_secs" "${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped"
}

if [[ -x $build/tests/gpu/sharc_gpu_kernel_tests ]]; then
  run_step kernel-tests 120 "$build/tests/gpu/sharc_gpu_kernel_tests"
  gtest_row "kernel tests" kernel-tests.log
fi
if [[ -x $build/tests/gpu/sharc_gpu_collective_tests ]]; then
  run_step collective-tests 300 "$build/tests/gpu/sharc_gpu_collective_tests"
  gtest_row "stream collectives (2 and 4 processes on one GPU; ipc, staged, device path)" \
    collective-tests.log
  row "device path between 2 emulated nodes: path taken" "$(grep -q 'device path taken' \
    "$out/collective-tests.log" && echo ok || echo "not seen")" 0 \
    "$(grep -o 'device path taken: [a-z-]*' "$out/collective-tests.log" | sort | uniq -c | tr '\n' ';')"
fi
if [[ -x $build/tests/multirank/sharc_multirank_tests ]]; then
  run_step staging-tests 120 "$build/tests/multirank/sharc_multirank_tests" \
    --gtest_filter='CudaDeviceQueue*:CudaStaged*'
  gtest_row "staging pipeline with the CUDA device queue" staging-tests.log
fi
if [[ -x $build/perf/sharc-gpu-kernel-bench ]]; then
  run_step kernel-bench 120 "$build/perf/sharc-gpu-kernel-bench" --bytes 256M --reps 20
  row "reduction kernels vs device copy (target 85 %)" "$(result)" \
    "$step_secs" "$(grep -E 'ratio' "$out/kernel-bench.log" | tr '\n' ';' | cut -c1-400)"
fi
if [[ -x $build/perf/sharc-gpu-perf ]]; then
  for coll in all_gather reduce_scatter all_reduce; do
    run_step "gpu-perf-$coll" 150 "$build/perf/sharc-gpu-perf" "$coll" -N 4 -b 1M -e 256M -f 16 \
      -d bfloat16 -o sum -n 10 -w 3 --check
    row "$coll, 4 processes on one GPU (target busbw 70 %)" \
      "$(result)" "$step_secs" \
      "$(grep -E 'of device copy|target' "$out/gpu-perf-$coll.log" | tr '\n' ';' | cut -c1-400)"
  done
  # The device path: 4 ranks on 2 emulated nodes over libfabric shm (FI_HMEM where libfabric
  # has CUDA), sharc's kernels reducing; busbw against the device copy rate.
  for coll in all_gather reduce_scatter; do
    run_step "gpu-perf-device-$coll" 150 env SHARC_DEVICE_PATH=direct SHARC_FI_PROVIDER=shm \
      SHARC_SHM=0 SHARC_DEBUG=INFO "$build/perf/sharc-gpu-perf" "$coll" -N 4 --nodes 2 \
      -b 1M -e 256M -f 16 -d bfloat16 -o sum -n 10 -w 3 --check
    row "$coll, device path, 4 ranks on 2 emulated nodes" \
      "$(result)" "$step_secs" \
      "$(grep -oE 'device path \([a-z]+ queue\): [^(]*' "$out/gpu-perf-device-$coll.log" | head -1);$(grep -E 'of device copy|target' "$out/gpu-perf-device-$coll.log" | tr '\n' ';' | cut -c1-300)"
  done
fi

# ---- torch with CUDA tensors -----------------------------------------------------------------
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  site=/tmp/sharc-site
  run_step torch-install 300 env SHARC_WITH_CUDA=ON CUDAARCHS=90 SHARC_JOBS="$jobs" \
    python3 -m pip install --no-build-isolation --no-deps --target "$site" --upgrade ./plugin/torch
  if [[ $step_rc -ne 0 ]]; then
    row "torch backend build" "FAILED" "$step_secs" "see torch-install.log"
  else
    run_step torch-cuda 300 env PYTHONPATH="$site:${PYTHONPATH:-}" \
      python3 -m pytest -q -p no:cacheprovider tests/torch/test_cuda.py
    row "torch backend, CUDA tensors (pytest test_cuda.py)" \
      "$(result)" "$step_secs" \
      "$(tail -1 "$out/torch-cuda.log")"
    run_step torch-cuda-nodes 300 env PYTHONPATH="$site:${PYTHONPATH:-}" \
      python3 -m pytest -q -p no:cacheprovider tests/torch/test_cuda_nodes.py
    row "torch, CUDA tensors on 2 emulated nodes: device path, FSDP, FSDP2, parallelize" \
      "$(result)" "$step_secs" "$(tail -1 "$out/torch-cuda-nodes.log")"
  fi
else
  row "torch backend, CUDA tensors" "not run" 0 "python3 has no torch with CUDA"
fi

# ---- unmodified NCCL over the network plugin --------------------------------------------------
if [[ -x $build/tests/nccl/sharc_nccl_e2e ]]; then
  run_step nccl-e2e 150 bash tools/nccl-e2e.sh "$build" 2
  row "NCCL over NCCL_NET_PLUGIN=sharc" "$(result)" \
    "$step_secs" "$(grep -E 'nccl_e2e|FAILED' "$out/nccl-e2e.log" | tail -2 | tr '\n' ';')"
  run_step nccl-e2e-collnet 150 bash tools/nccl-e2e.sh "$build" 2 NCCL_COLLNET_ENABLE=1
  row "NCCL with NCCL_COLLNET_ENABLE=1" "$(result)" \
    "$step_secs" "$(grep -E 'nccl_e2e|FAILED' "$out/nccl-e2e-collnet.log" | tail -2 | tr '\n' ';')"
else
  row "NCCL over the plugin" "not run" 0 "no NCCL found at configure time"
fi

total=$(($(date +%s) - start))
{
  echo "# sharc gpu-check: ${gpu:-no GPU}, $(date -u +%Y-%m-%dT%H:%M:%SZ), ${total} s"
  echo
  echo "| step | result | seconds | details |"
  echo "| --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} >"$summary"
for f in "$out"/*.log; do echo "==== $(basename "$f")"; cat "$f"; done >"$dest/logs.txt"
cat "$summary"
grep -q "FAILED" "$summary" && exit 1
exit 0

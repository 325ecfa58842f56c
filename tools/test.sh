#!/usr/bin/env bash
# Runs every test: installs the dependencies, configures with the `default` preset (build/),
# builds, and runs ctest, then the PyTorch backend's pytest suite on torch 2.6 (a Debian 13
# root) and on the newest PyPI torch (a venv). Extra arguments go to ctest (e.g. -L perf).
# Each stage's wall time is printed as it ends, and all of them in a table at the end.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${SHARC_JOBS:-2}

step() { echo; echo "==== $* ===="; }

# stage NAME DETAIL COMMAND...: runs COMMAND as the stage NAME (its banner says DETAIL too),
# prints its wall time when it ends and keeps it for the table; returns COMMAND's status.
stage_names=()
stage_secs=()
stage_codes=()
stage() {
  local name=$1 detail=$2 start=$SECONDS code=0
  shift 2
  step "${name}${detail:+ (${detail})}"
  "$@" || code=$?
  stage_names+=("$name")
  stage_secs+=($((SECONDS - start)))
  stage_codes+=("$code")
  echo "==== ${name}: $((SECONDS - start)) s$([[ $code -eq 0 ]] || echo ", exit status $code") ===="
  return "$code"
}
# The table of stage times; also on an early exit (a failed dependency, configure or build
# stage ends the run through set -e).
tabled=0
stage_table() {
  [[ $tabled -eq 0 && ${#stage_names[@]} -gt 0 ]] || return 0
  tabled=1
  echo
  echo "==== stage times ===="
  printf '%-28s %8s  %s\n' stage seconds "exit status"
  local i
  for i in "${!stage_names[@]}"; do
    printf '%-28s %8d  %d\n' "${stage_names[i]}" "${stage_secs[i]}" "${stage_codes[i]}"
  done
  printf '%-28s %8d\n' total "$SECONDS"
}
trap stage_table EXIT

stage "dependencies" "tools/install-deps.sh" bash tools/install-deps.sh

# CUDA code is compiled (not run) here too: nvcc comes with these machines under
# /usr/local/cuda, which need not be on PATH.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

stage "configure" "preset default" cmake --preset default

stage "build" "-j${jobs}" cmake --build --preset default -j"${jobs}"

status=0
stage "ctest" "ctest --preset default -j${jobs}" ctest --preset default -j"${jobs}" "$@" ||
  status=$?

# The parsers of outside bytes under libFuzzer (clang, ASan+UBSan; 10 s per target here), and
# the unit suite under ASan+UBSan (tools/sanitize.sh; TSan and the multirank suites are run
# by hand: see docs/faults.md "Sanitizers"). SHARC_FUZZ_CI=0 / SHARC_SANITIZE_CI=0 skip them.
hardening_status=0
if [[ ${SHARC_FUZZ_CI:-1} != 0 ]]; then
  stage "fuzzers" "tools/fuzz.sh -t 10" bash tools/fuzz.sh -t 10 || hardening_status=$?
fi
if [[ ${SHARC_SANITIZE_CI:-1} != 0 ]]; then
  stage "unit suite, ASan+UBSan" "tools/sanitize.sh asan -L unit" \
    bash tools/sanitize.sh asan -L unit || hardening_status=$?
fi

# The PyTorch backend is built and tested against both supported torch versions: torch 2.6 in
# a Debian 13 root (tools/torch-env.sh; Debian 12 has no torch) and the newest torch from PyPI
# in a venv (tools/torch-venv.sh); both are made once and cached. SHARC_TORCH_TESTS=0 skips
# them, SHARC_TORCH_TESTS=debian or =pypi runs one.
torch_status=0
which_torch=${SHARC_TORCH_TESTS:-all}
if [[ $which_torch == all || $which_torch == debian ]]; then
  stage "torch 2.6 (Debian 13)" "tools/torch-env.sh -- tools/torch-test.sh" \
    bash tools/torch-env.sh -- bash tools/torch-test.sh || torch_status=$?
fi
if [[ $which_torch == all || $which_torch == pypi ]]; then
  stage "torch, newest PyPI" "tools/torch-venv.sh -- tools/torch-test.sh" \
    bash tools/torch-venv.sh -- bash tools/torch-test.sh || torch_status=$?
fi

# Every command README.md and docs/ show, verbatim or in a short smoke form
# (SHARC_README_CHECK=0 skips).
readme_status=0
if [[ ${SHARC_README_CHECK:-1} != 0 ]]; then
  stage "README commands" "tools/readme-check.sh" bash tools/readme-check.sh || readme_status=$?
fi

stage_table

# The failing tests' own output once more, last here: CI shows the end of this log.
if [[ $status -ne 0 && -s build/Testing/Temporary/LastTestsFailed.log ]]; then
  step "output of the failed tests (their last 40 lines)"
  while IFS=: read -r _ name; do
    echo "---- ${name}"
    awk -v n="\"${name}\"" 'index($0, n " start time:") == 1 {on = 1; next}
      index($0, n " end time:") == 1 {on = 0} on' build/Testing/Temporary/LastTest.log | tail -40
  done <build/Testing/Temporary/LastTestsFailed.log
fi

echo
if [[ $status -eq 0 && $torch_status -eq 0 && $readme_status -eq 0 && $hardening_status -eq 0 ]]; then
  echo "SUMMARY: sharc build and tests PASSED"
else
  echo "SUMMARY: sharc tests FAILED (ctest exit status ${status}, fuzz/sanitizer exit status" \
    "${hardening_status}, torch tests exit status ${torch_status}, README check exit status" \
    "${readme_status}; see the output above)"
fi
[[ $status -eq 0 ]] || exit "$status"
[[ $hardening_status -eq 0 ]] || exit "$hardening_status"
[[ $torch_status -eq 0 ]] || exit "$torch_status"
exit "$readme_status"

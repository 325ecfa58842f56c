#!/usr/bin/env bash
# Runs every test: installs the dependencies, configures with the `default` preset (build/),
# builds, and runs ctest. Extra arguments go to ctest (e.g. -L perf, -R allreduce).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${SHARC_JOBS:-2}

step() { echo; echo "==== $* ===="; }

step "dependencies"
bash tools/install-deps.sh

step "configure (preset default)"
cmake --preset default

step "build (-j${jobs})"
cmake --build --preset default -j"${jobs}"

step "test (ctest --preset default -j${jobs})"
status=0
ctest --preset default -j"${jobs}" "$@" || status=$?

echo
if [[ $status -eq 0 ]]; then
  echo "SUMMARY: sharc build and tests PASSED"
else
  echo "SUMMARY: sharc tests FAILED (ctest exit status ${status}; see the output above)"
fi
exit "$status"

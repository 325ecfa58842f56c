#!/usr/bin/env bash
# Runs every test: installs the dependencies, configures with the `default` preset (build/),
# builds, and runs ctest, then the PyTorch backend's pytest suite in a Debian 13 root with
# torch 2.6. Extra arguments go to ctest (e.g. -L perf, -R allreduce).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${SHARC_JOBS:-2}

step() { echo; echo "==== $* ===="; }

step "dependencies"
bash tools/install-deps.sh

# CUDA code is compiled (not run) here too: nvcc comes with these machines under
# /usr/local/cuda, which need not be on PATH.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

step "configure (preset default)"
cmake --preset default

step "build (-j${jobs})"
cmake --build --preset default -j"${jobs}"

step "test (ctest --preset default -j${jobs})"
status=0
ctest --preset default -j"${jobs}" "$@" || status=$?

# The PyTorch backend builds and runs against torch 2.6 in a Debian 13 root (made once and
# cached by tools/torch-env.sh; Debian 12 has no torch). SHARC_TORCH_TESTS=0 skips it.
torch_status=0
if [[ ${SHARC_TORCH_TESTS:-1} != 0 ]]; then
  step "torch backend (tools/torch-env.sh -- tools/torch-test.sh)"
  bash tools/torch-env.sh -- bash tools/torch-test.sh || torch_status=$?
fi

echo
if [[ $status -eq 0 && $torch_status -eq 0 ]]; then
  echo "SUMMARY: sharc build and tests PASSED"
else
  echo "SUMMARY: sharc tests FAILED (ctest exit status ${status}, torch tests exit status" \
    "${torch_status}; see the output above)"
fi
[[ $status -eq 0 ]] || exit "$status"
exit "$torch_status"

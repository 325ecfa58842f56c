#!/usr/bin/env bash
# The PyTorch backend's tests against the torch of the `python3` on PATH: installs the `sharc`
# package with pip (which builds libsharc and the extension against that torch) and runs
# pytest on tests/torch. Extra arguments go to pytest. Run it through one of the two
# environments sharc is tested in:
#
#   bash tools/torch-venv.sh -- bash tools/torch-test.sh [-k PATTERN]   # newest PyPI torch
#   bash tools/torch-env.sh -- bash tools/torch-test.sh [-k PATTERN]    # torch 2.6 (Debian 13)
#
# SHARC_TORCH_SKIP_INSTALL=1 runs pytest on what is installed already.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null) || {
  echo "torch-test: python3 ($(command -v python3)) has no torch: run me through" \
    "tools/torch-venv.sh or tools/torch-env.sh" >&2
  exit 2
}
if [[ ${SHARC_TORCH_SKIP_INSTALL:-0} != 1 ]]; then
  echo "torch-test: pip install --no-build-isolation ./plugin/torch (torch $version)"
  # In the Debian root (a throwaway test image) the system Python takes the package.
  SHARC_JOBS=${SHARC_JOBS:-2} python3 -m pip install --no-build-isolation --break-system-packages \
    --no-deps --force-reinstall --quiet --root-user-action=ignore ./plugin/torch
fi
# Import the installed package, not the source tree's copy.
cd tests/torch
python3 -c 'import sharc.torch, sharc._C as c; print("torch-test: sharc", c.__file__, "built for torch", c.TORCH_VERSION_BUILT)'
status=0
python3 -m pytest -q -p no:cacheprovider "$@" . || status=$?
# pytest's 5 is "no tests collected": with a -k that matches nothing that is the caller's
# choice, but a plain run that collects nothing is a failure.
if [[ $status -eq 5 && $# -gt 0 ]]; then status=0; fi
exit $status

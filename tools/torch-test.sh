#!/usr/bin/env bash
# The PyTorch backend's tests, run inside the Debian 13 root that tools/torch-env.sh makes:
# installs the `sharc` package with pip (which builds libsharc and the extension against that
# root's torch 2.6) and runs pytest on tests/torch. Extra arguments go to pytest.
#
#   bash tools/torch-env.sh -- bash tools/torch-test.sh [-k PATTERN]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ -f /etc/debian_version && $(python3 -c 'import torch; print(torch.__version__)') ]] || {
  echo "torch-test: run me through tools/torch-env.sh (no torch here)" >&2
  exit 2
}
echo "torch-test: pip install --no-build-isolation ./plugin/torch (torch $(python3 -c 'import torch; print(torch.__version__)'))"
# The root is a throwaway test image, so the system Python takes the package.
SHARC_JOBS=${SHARC_JOBS:-2} pip install --no-build-isolation --break-system-packages \
  --no-deps --force-reinstall --quiet --root-user-action=ignore ./plugin/torch
# Import the installed package, not the source tree's copy.
cd tests/torch
python3 -c 'import sharc.torch, sharc._C as c; print("torch-test: sharc", c.__file__)'
exec python3 -m pytest -q -p no:cacheprovider "$@" .

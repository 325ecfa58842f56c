#!/usr/bin/env bash
# Installs what building and testing sharc needs (Debian/Ubuntu). Idempotent: when every
# package is already installed it changes nothing and does not even run `apt-get update`.
set -euo pipefail

packages=(
  cmake g++ make ninja-build pkg-config
  libfabric-dev libfabric-bin libhwloc-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  iproute2
  clang libclang-rt-14-dev  # libFuzzer and the sanitizers' runtimes (tools/fuzz.sh, tools/sanitize.sh)
  python3-matplotlib  # sharc-plan --plot and the validation/backtest plots (/usr/bin/python3)
  mmdebstrap  # the Debian 13 root with torch 2.6 for the PyTorch backend (tools/torch-env.sh)
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-deps: missing packages (${missing[*]}) and not root, and sudo is not available" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
echo "install-deps: done"

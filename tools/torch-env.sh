#!/usr/bin/env bash
# Runs a command inside a Debian 13 (trixie) root that has torch 2.6 (python3-torch), the
# environment the PyTorch backend is built and tested in (Debian 12's python3 has no torch).
#
#   tools/torch-env.sh [--rebuild] -- COMMAND [ARGS...]
#
# The root is made once with mmdebstrap (about a minute plus the download) and cached outside
# the checkout in $SHARC_TORCH_ROOT (default /var/cache/sharc/trixie-root); --rebuild makes it
# anew. The command runs as root in a private mount namespace with the checkout at /src
# (the working directory), /proc, /sys, /dev and /dev/shm bound in, USE_LIBUV=0 (torch's
# TCPStore there has no libuv) and the host's network (loopback for the stores). Needs root.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${SHARC_TORCH_ROOT:-/var/cache/sharc/trixie-root}
packages=python3-torch,libtorch-dev,python3-dev,pybind11-dev,python3-pybind11,cmake,g++,ninja-build
packages+=,pkg-config,libfabric-dev,libhwloc-dev,python3-pytest,python3-numpy,libgtest-dev
packages+=,python3-pip,python3-setuptools,python3-wheel,python3-expecttest,python3-hypothesis
rebuild=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rebuild) rebuild=1; shift ;;
    --) shift; break ;;
    *) echo "torch-env: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "torch-env: no command given (… -- COMMAND ARGS)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "torch-env: needs root (mmdebstrap, mounts, chroot)" >&2; exit 2; }

if [[ $rebuild -eq 1 || ! -x "$dir/usr/bin/python3" ]]; then
  command -v mmdebstrap >/dev/null || {
    apt-get update -q >/dev/null
    apt-get install -y -q mmdebstrap >/dev/null
  }
  echo "torch-env: making the trixie root in $dir (cached for later runs)" >&2
  rm -rf "$dir.tmp"
  mkdir -p "$(dirname "$dir")"
  mmdebstrap --variant=apt --include="$packages" trixie "$dir.tmp" >&2
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi

# Hugging Face transformers (the Llama models of the sharc.torch.parallelize tests) is not
# packaged in trixie: its wheels for the root's Python come from PyPI through this host's pip
# (its index and certificates) and are installed in the root offline, without the two the
# root's Debian packages provide (numpy, which torch 2.6 is built against; typing_extensions),
# the rest in /usr/local. Without it test_parallelize.py skips on torch 2.6.
if ! chroot "$dir" /usr/bin/python3 -c 'import transformers' >/dev/null 2>&1; then
  echo "torch-env: installing transformers in the trixie root" >&2
  pyver=$(chroot "$dir" /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  wheels=$dir/tmp/sharc-wheels
  rm -rf "$wheels"
  mkdir -p "$wheels"
  python3 -m pip download -q --only-binary=:all: --python-version "$pyver" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$wheels" transformers >&2
  mapfile -t wanted < <(cd "$wheels" && ls -- *.whl | grep -v -E '^(numpy|typing_extensions)-')
  chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root bash -c \
    'cd /tmp/sharc-wheels && python3 -m pip install -q --break-system-packages \
       --root-user-action=ignore --no-index --no-deps --ignore-installed "$@"' bash \
    "${wanted[@]}" >&2
  rm -rf "$wheels"
  chroot "$dir" /usr/bin/python3 -c 'import transformers' >/dev/null 2>&1 ||
    { echo "torch-env: transformers does not import in the trixie root" >&2; exit 1; }
fi

# A private mount namespace: the binds disappear with the command, however it ends.
exec unshare --mount --propagation private -- bash -c '
  set -e
  dir=$1 src=$2
  shift 2
  mkdir -p "$dir/src"
  for m in proc sys dev dev/shm; do mount --rbind "/$m" "$dir/$m"; done
  mount --bind "$src" "$dir/src"
  cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
  exec chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \
    USE_LIBUV=0 LANG=C.UTF-8 TERM="${TERM:-dumb}" bash -c "cd /src && exec \"\$@\"" bash "$@"
' bash "$dir" "$root" "$@"

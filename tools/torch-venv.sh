#!/usr/bin/env bash
# Runs a command with a Python virtual environment that has the newest torch from PyPI (the
# CUDA build; it runs CPU tensors without a GPU), transformers and the test tools first on
# PATH: the environment the PyTorch backend is built and tested in against current torch
# (tools/torch-env.sh is the one for torch 2.6).
#
#   tools/torch-venv.sh [--upgrade] -- COMMAND [ARGS...]
#
# The venv is made once in $SHARC_VENV (default: .venv in the checkout, ignored by git) with
# Debian's python3 (python3-venv is installed with apt-get when missing, as root) and reused;
# --upgrade moves an existing one to the newest torch. pip keeps its download cache outside
# the checkout (~/.cache/pip), so a fresh clone's venv does not download torch again.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${SHARC_VENV:-$root/.venv}
packages=(torch transformers pytest numpy expecttest hypothesis pybind11 setuptools wheel ninja)
upgrade=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --upgrade) upgrade=1; shift ;;
    --) shift; break ;;
    *) echo "torch-venv: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "torch-venv: no command given (… -- COMMAND ARGS)" >&2; exit 2; }

# Debian's interpreter, not a pyenv shim that PATH may put first.
python=/usr/bin/python3
[[ -x $python ]] || python=$(command -v python3)
# A venv whose torch does not import (an install that failed half-way) is made anew; pip's
# cache keeps that quick.
if [[ -x $venv/bin/python ]] && ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  echo "torch-venv: $venv has no working torch; making it again" >&2
  rm -rf "$venv"
fi
if [[ ! -x $venv/bin/python ]]; then
  if ! "$python" -c 'import ensurepip' 2>/dev/null; then
    [[ $(id -u) -eq 0 ]] || { echo "torch-venv: $python has no venv module; apt-get install python3-venv" >&2; exit 2; }
    apt-get update -q >/dev/null
    apt-get install -y -q python3-venv >/dev/null
  fi
  echo "torch-venv: making $venv" >&2
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  upgrade=1
fi
if [[ $upgrade -eq 1 ]]; then
  # A registry that stalls or drops a multi-GB download is retried (CI saw one such failure).
  for attempt in 1 2 3; do
    echo "torch-venv: pip install ${packages[*]} (attempt $attempt of 3)" >&2
    if "$venv/bin/pip" install -q --upgrade "${packages[@]}"; then break; fi
    [[ $attempt -lt 3 ]] || { echo "torch-venv: pip install failed 3 times" >&2; exit 1; }
    sleep $((attempt * 20))
  done
fi
if ! version=$("$venv/bin/python" -c 'import torch; print(torch.__version__)'); then
  echo "torch-venv: torch does not import in $venv (see the error above)" >&2
  exit 1
fi
echo "torch-venv: torch $version in $venv" >&2
export VIRTUAL_ENV=$venv PATH=$venv/bin:$PATH
cd "$root"
exec "$@"

#!/usr/bin/env bash
# Here (a machine with PyPI): fetch bench/peer/wheels.txt for the GPU machine's Python 3.12
# (manylinux x86_64) into .carry/peer/wheels, with their sha256 (run.sh checks them). ~18 MB.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dst="$root/.carry/peer/wheels"
rm -rf "$dst" && mkdir -p "$dst"
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --implementation cp \
  --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dst" -r "$root/bench/peer/wheels.txt"
(cd "$dst" && sha256sum ./*.whl | sed 's# \./# #' >SHA256SUMS)
du -sh "$dst"

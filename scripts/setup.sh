#!/usr/bin/env bash
# Installs what serve8 needs to build and test on a fresh Debian machine: the compilers' libraries
# from Debian's packages, and the Python tools the tests drive serve8 with. Safe to run again.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

PKGS=(cmake ninja-build ccache g++ pkg-config python3 python3-pip
      nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libsentencepiece-dev
      libopenblas-dev libcpp-httplib-dev libgtest-dev libpcre2-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Test oracles and clients (PyPI).
python3 -m pip install -q --disable-pip-version-check -r "$(dirname "$0")/../requirements-test.txt" 2>&1 \
  | grep -v "Running pip as the 'root' user" || true

# SGLang's own benchmark client, to check serve8 speaks its HTTP contract. 0.5.5 is the last
# release whose bench_serving imports without SGLang's GPU runtime; its test skips without it.
python3 -c "import sglang.bench_serving" 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check --no-deps sglang==0.5.5 2>&1 \
    | grep -v "Running pip as the 'root' user" || true

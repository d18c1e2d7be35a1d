#!/usr/bin/env bash
# Sets up, builds (CUDA too where nvcc exists, for sm_90a only) and runs every CPU test, then the
# C++ unit tests again under ASan + UBSan (scripts/sanitize.sh) and each libFuzzer target briefly
# (scripts/fuzz.sh), both from one clang build (build-fuzz/; docs/reliability.md records the
# 10-minute fuzz runs). GPU tests have the ctest label "gpu" and are left out here (`scripts/gpu.sh
# test` runs them); the pytest suites have "python" beside "cpu".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# Let ccache hit across checkouts in other folders (CI clones afresh).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVE8_WERROR=ON >/dev/null
cmake --build "$BUILD" -j "$JOBS"
ctest --test-dir "$BUILD" -LE gpu --output-on-failure -j "$JOBS" --timeout 1200
BUILD_DIR=build-fuzz JOBS="$JOBS" bash scripts/sanitize.sh
BUILD_DIR=build-fuzz FUZZ_SECONDS=${FUZZ_SECONDS:-20} JOBS="$JOBS" bash scripts/fuzz.sh

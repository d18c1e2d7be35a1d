#!/usr/bin/env bash
# Sets up, builds and starts `serve8 serve` on its default model; extra arguments go to serve8.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${BUILD_DIR:-build}
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVE8_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target serve8
exec "$BUILD/src/cli/serve8" serve "$@"

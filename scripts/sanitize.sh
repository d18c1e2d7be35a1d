#!/usr/bin/env bash
# The CPU unit tests (gtest; not the pytest suites, which drive the uninstrumented serve8 binary)
# under AddressSanitizer + UndefinedBehaviorSanitizer, in the clang build the fuzz targets use
# (scripts/sanitized_build.sh, build-fuzz/). Any sanitizer report fails the test that made it:
# UBSan aborts on its first report there, and ASan checks for leaks at exit.
#
#   scripts/sanitize.sh                      # configure, build the test binaries, run them
#   SANITIZE_FILTER=kv scripts/sanitize.sh   # only tests whose name matches (ctest -R)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
source scripts/sanitized_build.sh
cmake --build "$BUILD" -j "$JOBS" --target serve8_cpu_tests
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$BUILD" -L cpu -LE python --output-on-failure -j "$JOBS" --timeout 1200 \
  ${SANITIZE_FILTER:+-R "$SANITIZE_FILTER"}

# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: configures the one clang build that is
# instrumented with ASan + UBSan (and libFuzzer's coverage) in $BUILD, CPU only, so the fuzz targets
# and the sanitized unit tests share its objects (CI compiles the project once for both).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSERVE8_FUZZ=ON \
  -DSERVE8_CUDA=OFF -DSERVE8_TESTS=ON -DSERVE8_WERROR=ON >/dev/null

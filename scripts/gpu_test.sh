#!/usr/bin/env bash
# GPU tests of the CUDA backend, built here and run on a GPU machine.
#
# The GPU machine has cmake, ninja and nvcc but none of the Debian -dev packages serve8 builds
# against (fmt, spdlog, GTest, OpenBLAS, ...), so the binaries are built on this machine for
# sm_90a and carried there with the shared libraries they need that a bare CUDA image lacks;
# cuBLASLt and the CUDA runtime come from the GPU machine's own CUDA 13.
#
#   scripts/gpu_test.sh pack   here: configure build-cuda, build the GPU tests and the benchmark,
#                              stage them with their libraries and the shared data they read
#                              (stories260K and its golden ids) in .carry/gpu
#   scripts/gpu_test.sh run    on the GPU machine: ctest -L gpu over the staged binaries, then the
#                              benchmark; logs go to $OUT (or .carry/gpu/logs)
#   scripts/gpu_test.sh        pack, then run when a GPU is visible
#
# With the device tool: run(command="scripts/gpu_test.sh run", carry=[".carry/gpu"]).
# Extra arguments after `run` are passed to the test binary (e.g. --gtest_filter=...).
# SERVE8_TORCH_CHECK=1 adds the PyTorch check of the attention kernels (torch_attention_check.txt
# and .json in the logs); SERVE8_GPU_BENCH=0 skips the benchmarks.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stage="$root/.carry/gpu"
build="${SERVE8_GPU_BUILD:-$root/build-cuda}"
tests=(backend_cuda_test engine_cuda_golden_test engine_cuda_graph_test)
shared="${SERVE8_SHARED_DIR:-$root/../shared}"
# What the GPU tests read from shared/ (a few MB): the run sets SERVE8_SHARED_DIR to its copy.
shared_files=(models/stories260K/stories260K.bin golden/stories260K/greedy.json)
tools=(backend_cuda_bench bench_attention)

pack() {
  local args=(-S "$root" -B "$build" -G Ninja -DSERVE8_CUDA=ON)
  # CMake before 3.26 knows no CUDA C++20 flag for nvcc.
  if [[ "$(printf '%s\n' "$(cmake --version | head -1 | awk '{print $3}')" 3.26 | sort -V | head -1)" != 3.26 ]]; then
    args+=(-DCMAKE_USER_MAKE_RULES_OVERRIDE_CUDA="$root/src/backend/cuda/cuda20_rules.cmake")
  fi
  cmake "${args[@]}" >/dev/null
  ninja -C "$build" -j"${SERVE8_JOBS:-2}" "${tests[@]}" "${tools[@]}"
  rm -rf "$stage"
  mkdir -p "$stage/bin" "$stage/lib"
  for t in "${tests[@]}" "${tools[@]}"; do
    local bin
    bin="$(find "$build/tests" "$build/bench" -type f -name "$t" -perm -u+x 2>/dev/null | head -1)"
    [[ -n "$bin" ]] || { echo "gpu_test.sh: $t was not built" >&2; exit 1; }
    cp "$bin" "$stage/bin/"
    # Everything the binary links but glibc, the C++ runtime and CUDA's own libraries.
    ldd "$bin" | awk '/=> \// {print $1, $3}' | while read -r name path; do
      case "$name" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
        libcuda.so*|libcudart.so*|libcublas*.so*|libnvidia*) ;;
        *) cp -L "$path" "$stage/lib/$name" ;;
      esac
    done
  done
  for f in "${shared_files[@]}"; do
    mkdir -p "$stage/shared/$(dirname "$f")"
    cp "$shared/$f" "$stage/shared/$f"
  done
  printf '%s\n' "${tests[@]}" >"$stage/tests.txt"
  printf '%s\n' "${tools[@]}" >"$stage/tools.txt"
  { git -C "$root" rev-parse HEAD; git -C "$root" diff --quiet HEAD || echo "(+ uncommitted changes)"; } >"$stage/GIT_HASH"
  # A call carries at most 64 MiB: drop the host debug info and compress.
  strip --strip-debug "$stage"/bin/*
  tar -C "$stage" -cJf "$stage/gpu.tar.xz" bin lib shared tests.txt tools.txt GIT_HASH
  rm -rf "$stage/bin" "$stage/lib" "$stage/shared" "$stage/tests.txt" "$stage/tools.txt" "$stage/GIT_HASH"
  du -sh "$stage"
}

run() {
  [[ -f "$stage/gpu.tar.xz" ]] || { echo "gpu_test.sh: nothing staged in $stage (run 'scripts/gpu_test.sh pack' first)" >&2; exit 1; }
  local logs="${OUT:-$stage/logs}"
  mkdir -p "$logs"
  local packed="$stage"
  stage="${TMPDIR:-/tmp}/serve8-gpu"
  rm -rf "$stage" && mkdir -p "$stage" && tar -C "$stage" -xJf "$packed/gpu.tar.xz"
  local libpath="$stage/lib:/usr/local/cuda/lib64"
  # cuBLASLt from the CUDA toolkit, or from PyTorch's wheels where the toolkit lacks it.
  if ! LD_LIBRARY_PATH="$libpath" ldd "$stage/bin/${tests[0]}" | grep -q 'libcublasLt.so.* => /'; then
    local lt
    lt="$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1 || true)"
    [[ -n "$lt" ]] && libpath="$libpath:$(dirname "$lt")"
  fi
  export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # bench_attention records it in its JSON.
  SERVE8_GIT_HASH="$(head -1 "$stage/GIT_HASH" 2>/dev/null || echo unknown)"
  export SERVE8_GIT_HASH
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$logs/gpu.txt" || true
  ldd "$stage/bin/${tests[0]}" >"$logs/ldd.txt" 2>&1 || true

  # A ctest tree over the staged binaries (absolute paths of this machine).
  local ct="$stage/ctest"
  mkdir -p "$ct"
  : >"$ct/CTestTestfile.cmake"
  while read -r t; do
    [[ -n "$t" ]] || continue
    {
      printf 'add_test(%s "%s" "--gtest_output=xml:%s/%s.xml"' "$t" "$stage/bin/$t" "$logs" "$t"
      for a in "$@"; do printf ' "%s"' "$a"; done
      printf ')\nset_tests_properties(%s PROPERTIES LABELS gpu TIMEOUT %s ENVIRONMENT "LD_LIBRARY_PATH=%s;SERVE8_SHARED_DIR=%s")\n' \
        "$t" "${SERVE8_GPU_TEST_TIMEOUT:-300}" "$LD_LIBRARY_PATH" "$stage/shared"
    } >>"$ct/CTestTestfile.cmake"
  done <"$stage/tests.txt"
  local rc=0
  (cd "$ct" && ctest -L gpu --output-on-failure --output-log "$logs/ctest.log") || rc=$?
  # SERVE8_GPU_SANITIZE=<gtest filter>: also run those tests under compute-sanitizer's memcheck.
  if [[ -n "${SERVE8_GPU_SANITIZE:-}" ]]; then
    local cs
    cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
    timeout "${SERVE8_GPU_SANITIZE_TIMEOUT:-120}" "$cs" --tool memcheck --error-exitcode 3 \
      "$stage/bin/${tests[0]}" --gtest_filter="$SERVE8_GPU_SANITIZE" >"$logs/memcheck.txt" 2>&1 || rc=$?
    tail -5 "$logs/memcheck.txt"
  fi
  # SERVE8_TORCH_CHECK=1: PyTorch as an oracle independent of the CPU reference. The CUDA attention
  # tests dump every case (inputs, pools as stored, GPU output; ~260 MB) and
  # scripts/torch_attention_check.py recomputes them; the dumps are deleted after.
  if [[ "${SERVE8_TORCH_CHECK:-0}" == 1 ]]; then
    local dump="${TMPDIR:-/tmp}/attn_dump"
    rm -rf "$dump"
    SERVE8_ATTENTION_DUMP_DIR="$dump" timeout "${SERVE8_GPU_TEST_TIMEOUT:-300}" "$stage/bin/${tests[0]}" \
      --gtest_filter='AllShapes/CudaAttentionTest.*' >"$logs/torch_check_gtest.txt" 2>&1 || rc=1
    tail -3 "$logs/torch_check_gtest.txt"
    du -sh "$dump" || true
    python3 "$root/scripts/torch_attention_check.py" "$dump" --json "$logs/torch_attention_check.json" \
      >"$logs/torch_attention_check.txt" 2>&1 || rc=1
    grep -v '^ok ' "$logs/torch_attention_check.txt" | tail -40 || true
    rm -rf "$dump"
  fi
  if [[ "${SERVE8_GPU_BENCH:-1}" == 1 ]]; then
    while read -r t; do
      [[ -n "$t" ]] || continue
      local args=()
      [[ "$t" == bench_attention ]] && args=(--out "$logs/attention_bench.json" ${SERVE8_ATTENTION_BENCH_ARGS:-})
      timeout "${SERVE8_GPU_BENCH_TIMEOUT:-120}" "$stage/bin/$t" "${args[@]}" 2>&1 | tee "$logs/$t.txt" || rc=1
    done <"$stage/tools.txt"
  fi
  return $rc
}

case "${1:-all}" in
  pack) pack ;;
  run) shift; run "$@" ;;
  all)
    pack
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then run; else echo "gpu_test.sh: no GPU here; staged in $stage"; fi
    ;;
  *) echo "usage: scripts/gpu_test.sh [pack|run [gtest args...]]" >&2; exit 2 ;;
esac

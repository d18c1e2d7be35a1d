# Sourced by the scripts that run bench_attention from scripts/gpu_test.sh's pack on the GPU machine.
#
# unpack_gpu_pack STAGE: unpacks .carry/gpu/gpu.tar.xz into STAGE (emptied first: a warm machine
# may hold an older pack), sets libpath (the pack's libraries, the CUDA toolkit's, and the machine's
# cuBLASLt where the loader finds none there) and exports SERVE8_GIT_HASH (the pack's commit, for
# the benchmark's JSON).
# with_pack_libs CMD...: runs CMD with libpath in front of LD_LIBRARY_PATH. Not exported, so that
# the pack's libgomp, libpcre2 and the like stay out of the way of Python (FlashInfer, torch).
unpack_gpu_pack() {
  local stage="$1" packed lt
  packed="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.carry/gpu/gpu.tar.xz"
  [[ -f "$packed" ]] || { echo "no $packed (scripts/gpu_test.sh pack; carry .carry/gpu)" >&2; return 1; }
  rm -rf "$stage" && mkdir -p "$stage" && tar -C "$stage" -xJf "$packed" || return 1
  libpath="$stage/lib:/usr/local/cuda/lib64"
  if ! LD_LIBRARY_PATH="$libpath" ldd "$stage/bin/bench_attention" | grep -q 'libcublasLt.so.* => /'; then
    lt="$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1 || true)"
    [[ -n "$lt" ]] && libpath="$libpath:$(dirname "$lt")"
  fi
  SERVE8_GIT_HASH="$(head -1 "$stage/GIT_HASH" 2>/dev/null || echo unknown)"
  export SERVE8_GIT_HASH
}

with_pack_libs() { LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

# Sourced by the scripts that run bench_attention from scripts/gpu_test.sh's pack on the GPU
# machine: unpack_gpu_pack STAGE unpacks .carry/gpu/gpu.tar.xz into STAGE (emptied first) and puts
# its libraries, the CUDA toolkit's and the machine's cuBLASLt on LD_LIBRARY_PATH (exported).
unpack_gpu_pack() {
  local stage="$1" root lt
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  rm -rf "$stage" && mkdir -p "$stage" && tar -C "$stage" -xJf "$root/.carry/gpu/gpu.tar.xz" || return 1
  libpath="$stage/lib:/usr/local/cuda/lib64"
  lt="$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1 || true)"
  [[ -n "$lt" ]] && libpath="$libpath:$(dirname "$lt")"
  export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# shellcheck shell=bash
# Sourced by scripts/gpu.sh and the scripts under scripts/gpu/ on the GPU machine: unpacks the one
# pack (.gpu/pack.tar.xz, made by `scripts/gpu.sh pack`) and says how to run what it holds.
#
#   gpu_unpack        unpacks into $GPU_STAGE (default ${TMPDIR:-/tmp}/serve8-gpu) unless that
#                     holds this very pack already (same sha256): several verbs in one command, or
#                     commands on a warm machine, unpack once and never run an older pack's binaries;
#                     sets GPU_LIBPATH, exports SERVE8_GIT_HASH (benchmark JSON records it), GPU_STAGE
#   with_pack_libs CMD...  CMD with GPU_LIBPATH in front of LD_LIBRARY_PATH
#   $GPU_STAGE/run/NAME    bin/NAME behind a wrapper that does the same (for SERVE8_BIN and the
#                          like, where a Python process starts the binary)
# The pack's libraries (libgomp, libpcre2, OpenBLAS, ...) are never exported: in a Python process
# they shadow what torch and FlashInfer were built against.

GPU_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
GPU_PACK="${SERVE8_GPU_PACK:-$GPU_ROOT/.gpu/pack.tar.xz}"
GPU_STAGE="${GPU_STAGE:-${TMPDIR:-/tmp}/serve8-gpu}"
export GPU_STAGE

gpu_unpack() {
  [[ -f "$GPU_PACK" ]] || { echo "gpu: no $GPU_PACK (make it with 'scripts/gpu.sh pack' and send .gpu along)" >&2; return 1; }
  local sum lt
  sum="$(sha256sum "$GPU_PACK" | awk '{print $1}')"
  if [[ "$(cat "$GPU_STAGE/.pack_sha256" 2>/dev/null)" != "$sum" ]]; then
    rm -rf "$GPU_STAGE" && mkdir -p "$GPU_STAGE" && tar -C "$GPU_STAGE" -xJf "$GPU_PACK" || return 1
    echo "$sum" >"$GPU_STAGE/.pack_sha256"
  fi
  GPU_LIBPATH="$GPU_STAGE/lib:/usr/local/cuda/lib64"
  # cuBLASLt from the CUDA toolkit, or from PyTorch's wheels where the toolkit lacks it.
  if ! LD_LIBRARY_PATH="$GPU_LIBPATH" ldd "$GPU_STAGE/bin/serve8" 2>/dev/null | grep -q 'libcublasLt.so.* => /'; then
    lt="$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1 || true)"
    if [[ -z "$lt" ]]; then
      lt="$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)"
      [[ -n "$lt" ]] && lt="$(find "$lt" -name 'libcublasLt.so.13*' 2>/dev/null | head -1 || true)"
    fi
    [[ -n "$lt" ]] && GPU_LIBPATH="$GPU_LIBPATH:$(dirname "$lt")"
  fi
  # NCCL (opened at run time for tensor parallelism): the toolkit's, else PyPI's nvidia-nccl-cu13.
  if [[ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]]; then
    lt="$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)"
    [[ -n "$lt" ]] && lt="$(find "$lt" -name 'libnccl.so.2*' 2>/dev/null | head -1 || true)"
    [[ -n "$lt" ]] && GPU_LIBPATH="$GPU_LIBPATH:$(dirname "$lt")"
  fi
  mkdir -p "$GPU_STAGE/run"
  local b
  for b in "$GPU_STAGE"/bin/*; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
      "$GPU_LIBPATH" "$b" >"$GPU_STAGE/run/${b##*/}"
    chmod +x "$GPU_STAGE/run/${b##*/}"
  done
  SERVE8_GIT_HASH="$(head -1 "$GPU_STAGE/GIT_HASH" 2>/dev/null || echo unknown)"
  export SERVE8_GIT_HASH
}

with_pack_libs() { LD_LIBRARY_PATH="$GPU_LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

# The GPU and driver, for the logs (nothing when no driver is there).
gpu_describe() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>/dev/null ||
    echo "nvidia-smi: no GPU driver here"
}

#!/usr/bin/env bash
# Nsight Compute's SpeedOfLight, Occupancy, LaunchStats, WarpStateStats and SchedulerStats sections
# for one label, both sides, on the GPU machine after `bench/peer/run.sh install jit` in the same
# call: where a kernel's warps wait (long scoreboard = global memory, barrier, ...), to say why one
# side streams a shape slower. One report per side (and per SERVE8_* setting of STALL_ENV for ours)
# as CSV (ncu --page details) under $OUT/stalls/.
#
#   STALL_LABEL='llama-2-13b (40/40, d128) decode B=16 q=1 kv=2048 fp8_e5m2' \
#     STALL_ENV='default SERVE8_CUDA_DECODE_HEADS=1,SERVE8_CUDA_DECODE_MIN_CHUNK=2048' bash bench/peer/stalls.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-/tmp/serve8-stalls}/stalls"
stage=/tmp/serve8-stalls-stage
source "$root/bench/attention/gpu_pack.sh"
unpack_gpu_pack "$stage"
mkdir -p "$out"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
label="${STALL_LABEL:?STALL_LABEL: one bench_attention label}"
sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
  --section SchedulerStats --section MemoryWorkloadAnalysis)
i=0
for setting in ${STALL_ENV:-default}; do
  i=$((i + 1))
  env_args=()
  [[ "$setting" != default ]] && IFS=',' read -ra env_args <<<"$setting"
  echo "$setting" >"$out/ours_$i.setting"
  with_pack_libs env "${env_args[@]}" "$ncu" --clock-control none \
    "${sections[@]}" --kernel-name regex:attention_decode --launch-skip 1 --launch-count 1 --csv --page details \
    "$stage/bin/bench_attention" --filter "$label" --reps 1 --out "$out/ours_$i.json" >"$out/ours_$i.csv" 2>&1
  echo "ours $setting: rc=$?"
done
base=/tmp/serve8-peer
export FLASHINFER_WORKSPACE_BASE="$base" TVM_FFI_CACHE_DIR="$base/tvm-ffi" FLASHINFER_CUDA_ARCH_LIST=9.0a
export PYTHONPATH="$base/py${PYTHONPATH:+:$PYTHONPATH}" PATH="$base/py/bin:$PATH"
# The CUDA-core decode kernel's second launch (the first is the warm-up).
"$ncu" --clock-control none "${sections[@]}" --kernel-name regex:BatchDecode --launch-skip 1 --launch-count 1 \
  --csv --page details python3 "$root/bench/peer/flashinfer_bench.py" --filter "$label" --reps 1 \
  --out "$out/fi.json" >"$out/fi.csv" 2>&1
echo "fi: rc=$?"
python3 "$root/bench/peer/stalls_summary.py" "$out" >"$out/stalls.md" && echo "wrote $out/stalls.md"

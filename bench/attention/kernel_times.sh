#!/usr/bin/env bash
# Our decode kernels' own durations next to bench_attention's event time, on the GPU machine, from
# scripts/gpu_test.sh's pack (.carry/gpu): where the event time of a call exceeds the kernel's
# duration, the difference is launch and start-up, not the kernel's work.
#
#   KT_LABELS='label;label' [KT_REPS=10] [KT_ENV='A=1,B=2 C=3'] bash bench/attention/kernel_times.sh
# For each label (a bench_attention --filter) and each setting of KT_ENV ("default" = none; as in
# sweep_env.sh): Nsight Compute's gpu__time_duration of every attention_decode kernel of the run,
# without cache control or clock control (so the kernel sees the L2 the benchmark's own flush left,
# and the clocks it runs at), and the run's event-timed median. One pass (one metric), so no replay
# warms the caches; the event time comes from a second run without the profiler (which adds its own
# work between the events). Writes $OUT/kernel_times/*.csv, *.json and kernel_times.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
stage="${TMPDIR:-/tmp}/serve8-kt"
out="${OUT:-$stage/out}/kernel_times"
source "$root/bench/attention/gpu_pack.sh"
unpack_gpu_pack "$stage"
mkdir -p "$out"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1 || true)
[[ -x "$ncu" ]] || { echo "kernel_times: no ncu" >&2; exit 1; }
IFS=';' read -ra labels <<<"${KT_LABELS:?KT_LABELS: bench_attention labels}"
i=0
for setting in ${KT_ENV:-default}; do
  env_args=()
  [[ "$setting" != default ]] && IFS=',' read -ra env_args <<<"$setting"
  for l in "${labels[@]}"; do
    i=$((i + 1))
    echo "$setting" >"$out/run_$i.setting"
    echo "$l" >"$out/run_$i.label"
    with_pack_libs env "${env_args[@]}" "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      --kernel-name regex:attention_decode --csv --page raw "$stage/bin/bench_attention" --filter "$l" \
      --reps "${KT_REPS:-10}" --out "$out/run_$i.json" >"$out/run_$i.csv" 2>"$out/run_$i.err" ||
      echo "kernel_times: run $i ($setting, $l) failed" >&2
    with_pack_libs env "${env_args[@]}" "$stage/bin/bench_attention" --filter "$l" --reps "${KT_REPS:-10}" \
      --out "$out/run_$i.plain.json" >"$out/run_$i.plain.txt" 2>&1 || echo "kernel_times: plain run $i failed" >&2
  done
done
# KT_FI=1: FlashInfer's kernels on the same labels (flashinfer_bench.py), after bench/peer/run.sh's
# install and jit steps in the same call; a call's time is the sum of its kernels (decode, merge).
if [[ "${KT_FI:-0}" == 1 ]]; then
  base=/tmp/serve8-peer
  export FLASHINFER_WORKSPACE_BASE="$base" TVM_FFI_CACHE_DIR="$base/tvm-ffi" FLASHINFER_CUDA_ARCH_LIST=9.0a
  export PYTHONPATH="$base/py${PYTHONPATH:+:$PYTHONPATH}" PATH="$base/py/bin:$PATH"
  for l in "${labels[@]}"; do
    i=$((i + 1))
    echo "flashinfer" >"$out/run_$i.setting"
    echo "$l" >"$out/run_$i.label"
    "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      --kernel-name "regex:BatchDecode|BatchPrefill|MergeStates" --csv --page raw python3 \
      "$root/bench/peer/flashinfer_bench.py" --filter "$l" --reps "${KT_REPS:-10}" --out "$out/run_$i.json" \
      >"$out/run_$i.csv" 2>"$out/run_$i.err" || echo "kernel_times: FlashInfer run $i ($l) failed" >&2
    python3 "$root/bench/peer/flashinfer_bench.py" --filter "$l" --reps "${KT_REPS:-10}" \
      --out "$out/run_$i.plain.json" >"$out/run_$i.plain.txt" 2>&1 || echo "kernel_times: plain run $i failed" >&2
  done
fi
python3 "$root/bench/attention/kernel_times_summary.py" "$out" | tee "$out/kernel_times.md"

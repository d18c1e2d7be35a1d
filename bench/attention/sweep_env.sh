#!/usr/bin/env bash
# bench_attention once per environment setting, on the GPU machine, from scripts/gpu_test.sh's pack
# (.carry/gpu): one JSON and one table per setting under $OUT/sweep/, to compare kernel policies
# (SERVE8_CUDA_DECODE_MIN_CHUNK, SERVE8_CUDA_DECODE_HEADS, ...) in one call on one machine.
#
#   SWEEP="SERVE8_CUDA_DECODE_MIN_CHUNK=1024 SERVE8_CUDA_DECODE_MIN_CHUNK=128" \
#     bash bench/attention/sweep_env.sh --filter "decode B=1 " --filter "decode B=16 "
# Arguments go to bench_attention; "default" in SWEEP runs without any setting; a setting may join
# several variables with commas (SERVE8_CUDA_DECODE_MIN_CHUNK=128,SERVE8_CUDA_DECODE_HEADS=1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
stage="${TMPDIR:-/tmp}/serve8-sweep"
out="${OUT:-$stage/out}/sweep"
source "$root/bench/attention/gpu_pack.sh"
unpack_gpu_pack "$stage"
mkdir -p "$out"
for setting in ${SWEEP:-default}; do
  name=${setting//[^A-Za-z0-9_=]/_}
  env_args=()
  [[ "$setting" != default ]] && IFS=',' read -ra env_args <<<"$setting"
  with_pack_libs env "${env_args[@]}" "$stage/bin/bench_attention" --out "$out/$name.json" "$@" >"$out/$name.txt" 2>&1 ||
    echo "sweep: $setting failed (rc $?)" | tee -a "$out/$name.txt"
  echo "== $setting"; grep -E "decode|prefill|extend" "$out/$name.txt" | head -200
done

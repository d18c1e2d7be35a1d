#!/usr/bin/env bash
# The KV dtype accuracy table of docs/accuracy.md for stories260K, on the CPU backend.
# Text: the model's own samples (temperature 1, from BOS), 24 stories for calibration and 24
# others for evaluation; every KV dtype is compared with bf16 KV by `serve8 eval kld`.
#   scripts/accuracy_stories.sh [BUILD_DIR]   -> bench/results/accuracy_stories260k.jsonl
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
B="${1:-$root/build}/src/cli/serve8"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
"$B" convert llama2c --checkpoint "$root/../shared/models/stories260K/stories260K.bin" --output "$W/m" 2>/dev/null
sample() {  # seeds $1..$2, one story of ids per line (BOS first)
  for s in $(seq "$1" "$2"); do
    echo "1 $("$B" generate --device cpu --model-path "$W/m" --prompt-ids 1 --temperature 1 --seed "$s" \
      --max-new-tokens 255 --output-ids 2>/dev/null)"
  done
}
sample 1 24 >"$W/calib.txt"
sample 101 124 >"$W/eval.txt"
for g in per-layer per-head; do
  "$B" calibrate --device cpu --model-path "$W/m" --ids-file <(tr '\n' ' ' <"$W/calib.txt") --context 256 \
    --granularity "$g" --output "$W/scales_$g.json" 2>/dev/null
done
out="$root/bench/results/accuracy_stories260k.jsonl"
: >"$out"
run() {
  "$B" eval kld --device cpu --model-path "$W/m" --ids-file "$W/eval.txt" --context 256 \
    --reference-kv-cache-dtype bf16 --output-file "$out" "$@" 2>/dev/null | grep -E "^KV|Mean|Same|ΔPPL"
}
run --kv-cache-dtype fp16
run --kv-cache-dtype fp8_e5m2
run --kv-cache-dtype fp8_e4m3
run --kv-cache-dtype fp8_e4m3 --quantization-param-path "$W/scales_per-layer.json"
run --kv-cache-dtype fp8_e4m3 --quantization-param-path "$W/scales_per-head.json"
run --kv-cache-dtype int8
run --kv-cache-dtype int8 --quantization-param-path "$W/scales_per-head.json"  # rows centred on the K/V means
run --kv-cache-dtype int4
run --kv-cache-dtype int4 --quantization-param-path "$W/scales_per-head.json"

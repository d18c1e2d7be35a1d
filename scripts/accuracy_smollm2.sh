#!/usr/bin/env bash
# The KV dtype accuracy table of docs/accuracy.md for SmolLM2-135M-Instruct (GGUF Q4_1), on the
# CPU backend. Text: the human turns of ShareGPT_V3_filtered_500.json, the first 2048 tokens of
# conversations 0-99 for calibration and the first CHUNKS x CTX tokens of 100-499 (disjoint) for
# evaluation; every KV dtype is compared with bf16 KV, then FP8 weights with the checkpoint's.
# ~35 min on one core (CHUNKS=4, CTX=512); PARTS=fp8w runs only the FP8-weight rows (~30 min on two).
#   [CHUNKS=4] [CTX=512] [PARTS="kv fp8w"] scripts/accuracy_smollm2.sh [SERVE8] [MODEL]
#     -> bench/results/accuracy_smollm2_cpu.jsonl, accuracy_smollm2_fp8_weights_cpu.jsonl
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
B="${1:-$root/build/src/cli/serve8}"
M="${2:-$root/.models/SmolLM2-135M-Instruct.Q4_1.gguf}"
D="$root/../shared/data/sharegpt/ShareGPT_V3_filtered_500.json"
G="$root/../shared/data/gsm8k/train.jsonl"
CTX="${CTX:-512}" CHUNKS="${CHUNKS:-4}"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
jq -r '.[0:100][].conversations[] | .value, ""' "$D" >"$W/calib.txt"
jq -r '.[100:500][].conversations[] | .value, ""' "$D" >"$W/eval.txt"
PARTS="${PARTS:-kv fp8w}"
run() {  # TEST_MODEL: another checkpoint under test (default: MODEL)
  "$B" eval kld --device cpu --model-path "${TEST_MODEL:-$M}" --text "$W/eval.txt" --context "$CTX" --max-chunks "$CHUNKS" \
    --reference-kv-cache-dtype bf16 --output-file "$out" "$@" 2>/dev/null | grep -E "^weights|Mean|Same|ΔPPL"
}
if [[ " $PARTS " == *" kv "* ]]; then
for g in per-layer per-head; do
  "$B" calibrate --device cpu --model-path "$M" --text "$W/calib.txt" --context "$CTX" --max-tokens 2048 \
    --granularity "$g" --output "$W/scales_$g.json" 2>/dev/null
done
out="$root/bench/results/accuracy_smollm2_cpu.jsonl"
: >"$out"
run --kv-cache-dtype fp16
run --kv-cache-dtype fp8_e5m2
run --kv-cache-dtype fp8_e4m3
run --kv-cache-dtype fp8_e4m3 --quantization-param-path "$W/scales_per-layer.json"
run --kv-cache-dtype fp8_e4m3 --quantization-param-path "$W/scales_per-head.json"
run --kv-cache-dtype int8
run --kv-cache-dtype int8 --quantization-param-path "$W/scales_per-head.json"  # rows centred on the K/V means
run --kv-cache-dtype int4
run --kv-cache-dtype int4 --quantization-param-path "$W/scales_per-head.json"
fi
# FP8 weights (e4m3 per output channel) against the checkpoint's, both with bf16 KV: rounded at
# load, then checkpoints from `convert fp8` (GPTQ, act-order), each GEMM's input quantized per token
# or kept as it is (weight-only). GPTQ's calibration text: the calibration turns above and GSM8K's
# first training problems (disjoint from the scored text), 65,536 tokens.
if [[ " $PARTS " == *" fp8w "* ]]; then
  out="$root/bench/results/accuracy_smollm2_fp8_weights_cpu.jsonl"
  : >"$out"
  run --kv-cache-dtype bf16 --quantization fp8
  head -n 600 "$G" | jq -r '.question, .answer, ""' >"$W/gsm8k.txt"  # files, not a pipe that head cuts
  { cat "$W/calib.txt"; head -c 300000 "$W/gsm8k.txt"; } >"$W/calib_fp8w.txt"
  "$B" convert fp8 --model-path "$M" --calibration "$W/calib_fp8w.txt" --calibration-tokens 65536 --context "$CTX" \
    --activations token --output "$W/gptq_token" 2>/dev/null
  python3 "$root/scripts/fp8_weight_only.py" "$W/gptq_token" "$W/gptq_none"
  for inputs in token none; do
    TEST_MODEL="$W/gptq_$inputs" run --kv-cache-dtype bf16 --tokenizer-path "$M" --reference-model-path "$M"
  done
fi

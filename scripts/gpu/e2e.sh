#!/usr/bin/env bash
# End-to-end checks of the CUDA engine on the GPU machine, from the pack (scripts/gpu.sh pack).
# Internal to scripts/gpu.sh: `scripts/gpu.sh e2e [STEP...]`; STEPs, default golden hf bench http:
#   golden  stories260K greedy ids on the GPU (fp32 compute, generic head-dim-8 kernel) vs run.c's
#   hf      logits and greedy ids vs HF transformers, 2-layer Llama-3-8B / Llama-2-7B / Llama-3.1-8B
#   hf32    the same with serve8 in fp32 (--dtype float32): exact agreement expected
#   kvfp8   that Llama-3-8B with fp8_e5m2 / fp8_e4m3 / int8 / int4 KV against bf16 KV: mean KLD, top-1
#   bench   bench-one-batch, Llama-2-7B dummy weights, batch 1/16/64, 512-token prompts
#   mbu     bench-one-batch MBU and op profile, Llama-3-8B / Llama-2-13B dummy, each KV dtype, B=64-256
#   fp8w    bench-one-batch with --quantization fp8 (inputs per token, and weight-only through a
#           config that says so) against bf16 weights, the same models, bf16 and fp8_e5m2 KV, B=1
#           and 64, 1,024-token prompts, op profile
#   trace   bench-one-batch --trace-steps: each kernel's share of the decode step as the CUDA graph
#           runs it, the same models, bf16 and FP8 weights, bf16 and fp8_e5m2 KV, B=1 and 64,
#           1,024-token prompts (SERVE8_TRACE_* widen it), and bench/step_table.py's table
#   tuning  bench-one-batch with --gemm-tuning off (bench_gemm's table, the defaults) and auto (the
#           decode GEMMs the table lacks timed at start-up), alternated, the same models, bf16 and
#           FP8 weights, B=1/16/64, and bench/gemm_tuning_table.py's table
#   http    the HTTP tests of tests/server against `serve8 serve --device cuda`, Llama-2-7B dummy
#   constrained  bench/constrained at batch 64: grammar-constrained against free decode throughput
#   gguf    SmolLM2-135M-Instruct (Q4_1 GGUF): logits and greedy ids vs transformers loading the
#           same file (gguf_file=), then fp16 / fp8 / int8 / int4 KV vs bf16 KV and FP8 weights
#           (at load; GPTQ with inputs per token and weight-only) vs the file's (eval kld) on
#           ShareGPT prompts, rows for docs/accuracy.md. Needs the GGUF (scripts/gpu.sh says how
#           it is sent), so not a default step; gguf32 is gguf in fp32
# Logs go to $OUT: results.tgz (everything) and each step's *_summary.txt.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/scripts/gpu/lib.sh"

# The GGUF file: $SERVE8_E2E_GGUF, else its parts (stashed by earlier commands or sent along) joined
# and checked against their sha256.
gguf_file() {
  if [[ -n "${SERVE8_E2E_GGUF:-}" ]]; then echo "$SERVE8_E2E_GGUF"; return; fi
  local d=/tmp/serve8-gguf m name sum n i
  mkdir -p "$d"
  for m in "$root"/.gpu-gguf/*/MANIFEST; do
    [[ -f "$m" ]] || continue
    read -r _ _ _ i <"$m"
    [[ -f "$d/part_$i" ]] || cp "$(dirname "$m")/part" "$d/part_$i"
    cp "$m" "$d/MANIFEST"
  done
  [[ -f "$d/MANIFEST" ]] || { echo "gguf: no GGUF parts here or in $d (scripts/gpu.sh pack-gguf, stash-gguf)" >&2; return 1; }
  read -r name sum n _ <"$d/MANIFEST"
  if [[ ! -f "$d/$name" ]]; then
    for ((i = 1; i <= n; i++)); do
      [[ -f "$d/part_$i" ]] || { echo "gguf: part $i of $n is missing: stash-gguf it in an earlier command" >&2; return 1; }
    done
    for ((i = 1; i <= n; i++)); do cat "$d/part_$i"; done >"$d/$name"
  fi
  [[ "$(sha256sum "$d/$name" | awk '{print $1}')" == "$sum" ]] || { echo "gguf: $name: sha256 mismatch" >&2; rm -f "$d/$name"; return 1; }
  echo "$d/$name"
}

gguf() {
  # SERVE8_HF_DTYPE=float32: serve8 in fp32 (as hf32) and no KV rows (gguf32).
  local dt="${SERVE8_HF_DTYPE:-auto}" tag=""
  [[ "$dt" == auto ]] || tag="_$dt"
  local g d=/tmp/hf_smollm2 o="$OUT/gguf$tag" w="$OUT/kld"
  g="$(gguf_file)" || { echo "gguf: no model, step skipped"; return; }
  # transformers reads GGUF through the `gguf` package (pure Python), which the machine lacks.
  local whl
  for whl in "$E"/wheels/gguf/gguf-*.whl; do python3 -m zipfile -e "$whl" /tmp/ggufpy >>"$OUT/log.txt" 2>&1; done
  export PYTHONPATH="/tmp/ggufpy${PYTHONPATH:+:$PYTHONPATH}"
  {
    # (a) logits along transformers' greedy paths and free-running greedy ids, three text prompts.
    if [[ -f "$d/forced.txt" ]] || python3 "$root/scripts/hf_compare.py" build-gguf "$g" "$d" >>"$OUT/log.txt" 2>&1; then
      "$B" dump-logits --device cuda --dtype "$dt" --model-path "$g" --prompts-file "$d/prompts.txt" --decode-tokens 8 \
        --greedy-tokens 32 --max-total-tokens 4096 --output "${o}_free" >>"$OUT/log.txt" 2>&1 &&
        "$B" dump-logits --device cuda --dtype "$dt" --model-path "$g" --prompts-file "$d/forced.txt" --decode-tokens 32 \
          --greedy-tokens 0 --max-total-tokens 4096 --output "${o}_forced" >>"$OUT/log.txt" 2>&1 &&
        python3 "$root/scripts/hf_compare.py" compare "$d" "${o}_free" "${o}_forced" 2>>"$OUT/log.txt" ||
        echo "gguf: dump-logits or the comparison failed (see log.txt)"
      rm -f "$OUT"/gguf"$tag"_*.npy
    else
      echo "gguf: transformers could not load $g (see log.txt)"
    fi
    [[ "$dt" == auto ]] && {
    # (b) each KV dtype against bf16 KV: 100 ShareGPT prompts to calibrate e4m3 on, 400 to score.
    mkdir -p "$w"
    python3 - "$E/shared/data/sharegpt/ShareGPT_V3_filtered_500.json" "$w" <<'PY'
import json, sys
texts = [c["value"] for x in json.load(open(sys.argv[1])) for c in x["conversations"]]
open(f"{sys.argv[2]}/calib.txt", "w").write("\n\n".join(texts[:100]))
open(f"{sys.argv[2]}/eval.txt", "w").write("\n\n".join(texts[100:]))
PY
    "$B" calibrate --device cuda --model-path "$g" --text "$w/calib.txt" --context 512 --max-total-tokens 16384 \
      --granularity per-head --output "$w/scales.json" >>"$OUT/log.txt" 2>&1 || echo "gguf: calibrate failed (see log.txt)"
    for kv in "fp16" "fp8_e5m2" "fp8_e4m3" "fp8_e4m3 --quantization-param-path $w/scales.json" "int8" "int4" \
      "int8 --quantization-param-path $w/scales.json" "int4 --quantization-param-path $w/scales.json"; do
      # shellcheck disable=SC2086  # kv holds the dtype and, for the last row, its scales
      "$B" eval kld --device cuda --model-path "$g" --text "$w/eval.txt" --context 512 \
        --reference-kv-cache-dtype bf16 --output-file "$OUT/accuracy_smollm2.jsonl" --kv-cache-dtype $kv \
        2>>"$OUT/log.txt" | grep -E "^KV|Mean|99.0|Same|PPL|RMS" || echo "gguf: eval kld --kv-cache-dtype $kv failed"
    done
    # (c) FP8 weights against the checkpoint's (bf16 KV both): rounded at load, then GPTQ checkpoints
    # (convert fp8 on this machine's CPUs; calibration: the 100 prompts and GSM8K's first problems,
    # 65,536 tokens, as scripts/accuracy_smollm2.sh) with inputs per token and weight-only.
    python3 - "$E/shared/data/gsm8k/train.jsonl" "$w" <<'PY'
import json, sys
qa = "".join(f"{p['question']}\n{p['answer']}\n\n" for p in map(json.loads, open(sys.argv[1])))
open(f"{sys.argv[2]}/calib_fp8w.txt", "w").write(open(f"{sys.argv[2]}/calib.txt").read() + "\n" + qa[:300000])
PY
    local fp8w=("--model-path $g --quantization fp8")
    # One conversion: the weight-only checkpoint is its tensors under another config.
    if OMP_NUM_THREADS=16 "$B" convert fp8 --model-path "$g" --calibration "$w/calib_fp8w.txt" --calibration-tokens 65536 \
      --context 512 --activations token --output "$w/gptq_token" >>"$OUT/log.txt" 2>&1; then
      python3 "$root/scripts/fp8_weight_only.py" "$w/gptq_token" "$w/gptq_none"
      for inputs in token none; do
        fp8w+=("--model-path $w/gptq_$inputs --tokenizer-path $g --reference-model-path $g")
      done
    else
      echo "gguf: convert fp8 failed (see log.txt)"
    fi
    for args in "${fp8w[@]}"; do
      # shellcheck disable=SC2086  # args holds the flags of one row
      "$B" eval kld --device cuda --text "$w/eval.txt" --context 512 --kv-cache-dtype bf16 \
        --reference-kv-cache-dtype bf16 --output-file "$OUT/accuracy_smollm2_fp8_weights.jsonl" $args \
        2>>"$OUT/log.txt" | grep -E "^weights|Mean|99.0|Same|PPL|RMS" || echo "gguf: eval kld $args failed"
    done
    }
  } | tee "$OUT/gguf${tag}_summary.txt"
}

gguf32() { SERVE8_HF_DTYPE=float32 gguf; }

golden() {
  local g="$E/shared/golden/stories260K/greedy.json"
  "$B" convert llama2c --checkpoint "$E/shared/models/stories260K/stories260K.bin" --output /tmp/s260 2>>"$OUT/log.txt"
  for mode in "float32 auto" "bfloat16 bf16"; do
    set -- $mode
    for c in 0 1 2; do
      ids=$(python3 -c "import json;print(' '.join(map(str,json.load(open('$g'))['cases'][$c]['prompt_ids'])))")
      n=$(python3 -c "import json;print(len(json.load(open('$g'))['cases'][$c]['greedy_ids']))")
      "$B" generate --device cuda --dtype "$1" --kv-cache-dtype "$2" --model-path /tmp/s260 --prompt-ids "$ids" \
        --temperature 0 --ignore-eos --output-ids --max-new-tokens "$n" >"$OUT/stories_$1_$c.txt" 2>>"$OUT/log.txt"
    done
  done
  python3 - "$g" "$OUT" <<'PY' | tee "$OUT/stories_summary.txt"
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
for dt in ["float32", "bfloat16"]:
    for c, case in enumerate(cases):
        try:
            got = list(map(int, open(f"{sys.argv[2]}/stories_{dt}_{c}.txt").read().split()))
        except Exception as e:
            print(f"{dt} case {c}: error {e}"); continue
        want = case["greedy_ids"]
        lead = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        print(f"stories260K on cuda, --dtype {dt}: case {c}: {lead}/{len(want)} leading ids equal run.c's"
              f"{' (all, exact)' if got == want else ''}")
PY
}

hf() {
  # SERVE8_HF_DTYPE=float32: serve8 in fp32 too (the generic attention kernel), for exact agreement.
  local dt="${SERVE8_HF_DTYPE:-auto}" tag=""
  [[ "$dt" == auto ]] || tag="_$dt"
  for cfg in llama-3-8b llama-2-7b llama-3.1-8b; do
    local d="/tmp/hf_$cfg"
    [[ -f "$d/forced.txt" ]] || python3 "$root/scripts/hf_compare.py" build "$E/shared/configs/$cfg.json" 2 "$d" \
      >>"$OUT/log.txt" 2>&1 || { echo "$cfg: HF build failed (see log.txt)"; continue; }
    local o="$OUT/hf_${cfg}${tag}"
    "$B" dump-logits --device cuda --dtype "$dt" --model-path "$d" --prompts-file "$d/prompts.txt" --decode-tokens 8 \
      --greedy-tokens 32 --max-total-tokens 4096 --output "${o}_free" >>"$OUT/log.txt" 2>&1 &&
      "$B" dump-logits --device cuda --dtype "$dt" --model-path "$d" --prompts-file "$d/forced.txt" --decode-tokens 32 \
        --greedy-tokens 0 --max-total-tokens 4096 --output "${o}_forced" >>"$OUT/log.txt" 2>&1 || {
      echo "$cfg: serve8 dump-logits failed (see log.txt)"; continue; }
    python3 "$root/scripts/hf_compare.py" compare "$d" "${o}_free" "${o}_forced" 2>>"$OUT/log.txt"
    rm -f "$OUT"/hf_"$cfg"*.npy
  done | tee "$OUT/hf${tag}_summary.txt"
}

hf32() { SERVE8_HF_DTYPE=float32 hf; }

kvfp8() {
  # The 2-layer Llama-3-8B of `hf` with FP8 KV against its bf16-KV run: mean KLD, top-1.
  local cfg=llama-3-8b d="/tmp/hf_llama-3-8b"
  [[ -f "$d/forced.txt" ]] || python3 "$root/scripts/hf_compare.py" build "$E/shared/configs/$cfg.json" 2 "$d" \
    >>"$OUT/log.txt" 2>&1
  for kv in bf16 fp8_e5m2 fp8_e4m3 int8 int4; do
    "$B" dump-logits --device cuda --kv-cache-dtype "$kv" --model-path "$d" --prompts-file "$d/forced.txt" \
      --decode-tokens 32 --greedy-tokens 0 --max-total-tokens 4096 --output "$OUT/kv_$kv" >>"$OUT/log.txt" 2>&1
  done
  for kv in fp8_e5m2 fp8_e4m3 int8 int4; do
    python3 "$root/scripts/kv_compare.py" "$OUT/kv_bf16.npy" "$OUT/kv_$kv.npy" "$cfg (2 layers) KV $kv vs bf16 KV"
  done | tee "$OUT/kvfp8_summary.txt"
  rm -f "$OUT"/kv_*.npy
}

bench() {
  local cfg="$E/shared/configs/llama-2-7b.json"
  for graph in "" "--disable-cuda-graph"; do
    "$B" bench-one-batch --device cuda --model-path "$cfg" --load-format dummy --batch-size 1 16 64 \
      --input-len 512 --output-len 128 --profile-steps 16 --result-filename "$OUT/bench_one_batch.jsonl" $graph \
      2>>"$OUT/log.txt" | tee -a "$OUT/bench_summary.txt"
  done
}

# The copy bandwidth measured here (0 where it could not be: no MBU column), into $copy and the
# first line of STEP's summary.
measure_copy() {
  copy=$(python3 "$root/scripts/seed_experiment.py" copybw cuda 2>>"$OUT/log.txt")
  [[ "$copy" =~ ^[0-9.]+$ ]] || copy=0
  echo "copy bandwidth ${copy} GB/s" | tee "$OUT/$1_summary.txt"
}

# one_batch STEP LABEL ARGS...: bench-one-batch on dummy weights with prompts of $input_len tokens
# (1,024 unless the caller sets it) and ARGS, its records into STEP's JSONL and its lines, behind
# LABEL, into STEP's summary.
one_batch() {
  local step=$1 label=$2
  shift 2
  "$B" bench-one-batch --device cuda --load-format dummy --input-len "${input_len:-1024}" --output-len 32 --copy-gbps "$copy" \
    --result-filename "$OUT/${step}_bench_one_batch.jsonl" "$@" 2>>"$OUT/log.txt" |
    sed "s/^/$label: /" | tee -a "$OUT/${step}_summary.txt"
}

# Decode MBU at batch >= 64, as one static batch: Llama-3-8B and Llama-2-13B (dummy
# weights), each KV dtype, batch 64/128/256 (a batch the pool cannot hold ends that run with an
# error in log.txt after the smaller ones are written); --profile-steps splits a step into its ops
# (graphs off: kernel time by op, and the wall-clock rest is launch gaps and host work).
# SERVE8_MBU_MODELS / _BATCHES / _KV narrow it.
mbu() {
  measure_copy mbu
  for cfg in ${SERVE8_MBU_MODELS:-llama-3-8b llama-2-13b}; do
    for kv in ${SERVE8_MBU_KV:-auto fp8_e5m2 fp8_e4m3}; do
      # shellcheck disable=SC2086  # the batch list is several arguments
      one_batch mbu "$cfg $kv" --model-path "$E/shared/configs/$cfg.json" --kv-cache-dtype "$kv" \
        --batch-size ${SERVE8_MBU_BATCHES:-64 128 256} --profile-steps 4
    done
  done
}

# FP8 weights (--quantization fp8) against the bf16 checkpoint: the decode step and its ops.
# SERVE8_FP8W_MODELS / _KV / _BATCHES narrow it.
fp8w() {
  measure_copy fp8w
  for cfg in ${SERVE8_FP8W_MODELS:-llama-3-8b llama-2-13b}; do
    # Weight-only FP8 (bf16 inputs): the same config with a compressed-tensors scheme without inputs.
    mkdir -p "/tmp/wonly_$cfg"
    python3 - "$E/shared/configs/$cfg.json" "/tmp/wonly_$cfg/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["quantization_config"] = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {
    "group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}
json.dump(c, open(sys.argv[2], "w"))
PY
    for kv in ${SERVE8_FP8W_KV:-auto fp8_e5m2}; do
      for q in none fp8 w-only; do
        local model="$E/shared/configs/$cfg.json" quant="$q"
        [[ $q == w-only ]] && model="/tmp/wonly_$cfg" quant=fp8
        # shellcheck disable=SC2086  # the batch list is several arguments
        one_batch fp8w "$cfg kv $kv weights $q" --model-path "$model" --kv-cache-dtype "$kv" --quantization "$quant" \
          --batch-size ${SERVE8_FP8W_BATCHES:-1 64} --profile-steps 4
      done
    done
  done
}

# The decode step's kernels as the graph runs them (CUPTI): GEMM, attention and other ops per step.
# SERVE8_TRACE_MODELS / _KV / _QUANT / _BATCHES / _LENS (prompt tokens, default 1024) narrow or
# widen it; bench/step_table.py makes bench/README's table of the records.
trace() {
  measure_copy trace
  local input_len
  for input_len in ${SERVE8_TRACE_LENS:-1024}; do
    for cfg in ${SERVE8_TRACE_MODELS:-llama-3-8b llama-2-13b}; do
      for kv in ${SERVE8_TRACE_KV:-auto fp8_e5m2}; do
        for q in ${SERVE8_TRACE_QUANT:-none fp8}; do
          # A request table row holds the prompt, its 32 outputs and the traced steps, past the
          # model's own length where the prompt asks for it (dummy weights: a speed run).
          # shellcheck disable=SC2086  # the batch list is several arguments
          one_batch trace "$cfg kv $kv weights $q prompt $input_len" --model-path "$E/shared/configs/$cfg.json" \
            --kv-cache-dtype "$kv" --quantization "$q" --batch-size ${SERVE8_TRACE_BATCHES:-1 64} --trace-steps 4 \
            --context-length $((input_len + 64))
        done
      done
    done
  done
  python3 "$root/bench/step_table.py" "$OUT/trace_bench_one_batch.jsonl" | tee -a "$OUT/trace_summary.txt"
}

# The decode step with --gemm-tuning off and auto (or SERVE8_TUNING_MODES), alternated
# SERVE8_TUNING_ROUNDS times (default 2); SERVE8_TUNING_MODELS / _QUANT / _BATCHES narrow it.
tuning() {
  measure_copy tuning
  local r cfg q mode
  for ((r = 1; r <= ${SERVE8_TUNING_ROUNDS:-2}; r++)); do
    for cfg in ${SERVE8_TUNING_MODELS:-llama-3-8b llama-2-13b}; do
      for q in ${SERVE8_TUNING_QUANT:-none fp8}; do
        for mode in ${SERVE8_TUNING_MODES:-off auto}; do
          # shellcheck disable=SC2086  # the batch list is several arguments
          one_batch tuning "$cfg weights $q gemm-tuning $mode" --model-path "$E/shared/configs/$cfg.json" \
            --quantization "$q" --batch-size ${SERVE8_TUNING_BATCHES:-1 16 64} --gemm-tuning "$mode"
        done
      done
    done
  done
  python3 "$root/bench/gemm_tuning_table.py" "$OUT/tuning_bench_one_batch.jsonl" | tee -a "$OUT/tuning_summary.txt"
}

# In a subshell: the clients on PYTHONPATH would shadow the machine's packages in later steps.
http() (
  export PYTHONPATH="$E/py/clients${PYTHONPATH:+:$PYTHONPATH}"
  export SERVE8_BIN="$B" SERVE8_SHARED_DIR="$E/shared" SERVE8_TEST_SERVER_ARGS="--device cuda --max-total-tokens 65536"
  export SERVE8_TEST_TEXT_MODEL="--model-path $E/shared/configs/llama-2-7b.json --load-format dummy --tokenizer-path $E/shared/models/llama2-tokenizer"
  for suite in ${SERVE8_HTTP_SUITES:-api errors policy load}; do
    timeout "${SERVE8_HTTP_TIMEOUT:-240}" python3 -m pytest -q -p no:cacheprovider "$root/tests/server/test_$suite.py" \
      >"$OUT/http_$suite.txt" 2>&1
    echo "tests/server/test_$suite.py on cuda (Llama-2-7B dummy + stories260K): rc=$? $(tail -1 "$OUT/http_$suite.txt")"
    # What failed, in the summary that comes back (the full logs stay in results.tgz).
    grep -E "^(FAILED|E  )" "$OUT/http_$suite.txt" | head -20
  done | tee "$OUT/http_summary.txt"
)

# Constrained decoding at batch 64 (bench/constrained): Llama-3-8B dummy weights, the Llama-2
# tokenizer's vocabulary in the grammars, unconstrained against JSON schema, regex and EBNF.
constrained() {
  python3 "$root/bench/constrained/constrained_bench.py" --bin "$B" --config "$E/shared/configs/llama-3-8b.json" \
    --tokenizer "$E/shared/models/llama2-tokenizer" --requests 64 --out "$OUT/constrained_bench_h200.jsonl" \
    -- --device cuda >"$OUT/constrained_summary.txt" 2>&1
  cat "$OUT/constrained_summary.txt"
  cp "$OUT/constrained_bench_h200.jsonl" "$final/" 2>/dev/null || true
}

steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(golden hf bench http)
for s in "${steps[@]}"; do
  case "$s" in
    golden|hf|hf32|kvfp8|bench|mbu|fp8w|trace|tuning|http|gguf|gguf32|constrained) ;;
    *) echo "e2e: unknown step $s (golden hf hf32 kvfp8 bench mbu fp8w trace tuning http gguf gguf32 constrained)" >&2
       exit 2 ;;
  esac
done
# Steps work in a scratch folder; $OUT receives one archive of it and the summaries, so that few
# files come back.
final="${OUT:-/tmp/serve8-gpu-out}"
OUT="${TMPDIR:-/tmp}/serve8-e2e-work"
rm -rf "$OUT" && mkdir -p "$OUT" "$final"
gpu_unpack || exit 1
E="$GPU_STAGE"
# serve8 behind a wrapper that adds the pack's libraries: the Python around it must not see them.
B="$E/run/serve8"
gpu_describe | tee "$OUT/gpu.txt"
cp "$E/GIT_HASH" "$OUT/"
for s in "${steps[@]}"; do
  echo "== $s" | tee -a "$OUT/log.txt"
  "$s"
done
tar -C "$OUT" -czf "$final/results.tgz" .
cp "$OUT"/*_summary.txt "$final/" 2>/dev/null || true

#!/usr/bin/env bash
# End-to-end smoke of the CUDA engine on a GPU machine, from binaries staged in .carry/e2e
# (serve8 built here with CUDA, its non-CUDA shared libraries, the stories260K checkpoint, the
# golden ids, two configs and the Llama-2 tokenizer). Writes logs under $OUT.
#   device run: scripts/gpu_e2e.sh   with carry [".carry/e2e"]
set -uo pipefail
E=.carry/e2e
OUT=${OUT:-/tmp/serve8-e2e}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$E/lib:${LD_LIBRARY_PATH:-}"
B="$E/serve8"
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv | tee "$OUT/gpu.txt"
$B convert llama2c --checkpoint "$E/stories260K.bin" --output /tmp/s260 2>>"$OUT/log.txt"
for kv in bf16 fp16 fp8_e5m2 fp8_e4m3; do
  for c in 0 1 2; do
    ids=$(python3 -c "import json;print(' '.join(map(str,json.load(open('$E/greedy.json'))['cases'][$c]['prompt_ids'])))")
    n=$(python3 -c "import json;print(len(json.load(open('$E/greedy.json'))['cases'][$c]['greedy_ids']))")
    $B generate --device cuda --model-path /tmp/s260 --prompt-ids "$ids" --temperature 0 --ignore-eos \
      --output-ids --max-new-tokens "$n" --kv-cache-dtype $kv >"$OUT/stories_${kv}_$c.txt" 2>>"$OUT/log.txt"
  done
done
python3 - "$E/greedy.json" "$OUT" <<'PY' | tee "$OUT/stories_summary.txt"
import json, sys
g = json.load(open(sys.argv[1]))["cases"]
for kv in ["bf16", "fp16", "fp8_e5m2", "fp8_e4m3"]:
    row = []
    for c, case in enumerate(g):
        try:
            got = list(map(int, open(f"{sys.argv[2]}/stories_{kv}_{c}.txt").read().split()))
        except Exception as e:
            row.append(f"case {c}: error {e}"); continue
        want = case["greedy_ids"]
        agree = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        row.append(f"case {c}: {agree}/{len(want)} leading ids equal")
    print(f"stories260K on cuda, KV {kv}: " + "; ".join(row))
PY
# A dummy-weight Llama-2-7B and Llama-3-8B with the real tokenizer: load, prefill, decode.
for cfg in llama-2-7b llama-3-8b; do
  for kv in auto fp8_e5m2 fp8_e4m3; do
    /usr/bin/time -f "%e s wall" $B generate --device cuda --model-path "$E/$cfg.json" --load-format dummy \
      --tokenizer-path "$E/llama2-tokenizer" --prompt "The capital of France is" --max-new-tokens 128 \
      --temperature 0 --ignore-eos --output-ids --kv-cache-dtype $kv >"$OUT/${cfg}_$kv.txt" 2>"$OUT/${cfg}_$kv.log"
    echo "$cfg kv=$kv rc=$? $(grep -E 'KV pool|generate:' "$OUT/${cfg}_$kv.log" | sed 's/.*\] //' | tr '\n' ' ') $(tail -1 "$OUT/${cfg}_$kv.log")"
  done
done | tee "$OUT/dummy_summary.txt"

#!/usr/bin/env bash
# The seed's experiment (issue #5) on a GPU machine: for Llama-2-13B and Llama-3-8B (dummy
# weights, --disable-radix-cache) and each KV dtype (bf16, fp8_e5m2, fp8_e4m3), a server and
# then two client runs against it, one after the other on the same machine:
#   sharegpt  ShareGPT prompts cycled to N, outputs uniform in [1, 512] (seed 1), --request-rate 128
#   random    1024 in / 512 out, --random-range-ratio 0.5, N prompts, --request-rate inf
# After each run, /get_server_info gives the pool size, the peak number of running requests and the
# decode steps' time and KV tokens, from which the decode model-bandwidth utilization follows
# against the device copy bandwidth measured here (torch). One JSON line per run in $OUT.
#   run from a checkout on the GPU machine, serve8 staged by scripts/gpu_e2e.sh pack:
#   bash scripts/seed_experiment.sh [N=1000]      (needs .carry/e2e)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-1000}"
OUT="${OUT:-/tmp/seed-out}"
mkdir -p "$OUT"
E="${TMPDIR:-/tmp}/serve8-seed"
rm -rf "$E" && mkdir -p "$E" && tar -C "$E" -xJf "$root/.carry/e2e/e2e.tar.xz"
export LD_LIBRARY_PATH="$E/lib:${LD_LIBRARY_PATH:-}"
export SERVE8_GIT_HASH="$(head -1 "$E/GIT_HASH")"
B="$E/serve8"
S="$E/shared"
copy=$(python3 -c "
import torch
x = torch.empty(2**31, dtype=torch.uint8, device='cuda'); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(10): y.copy_(x)
e.record(); torch.cuda.synchronize()
print(2 * 10 * x.numel() / (s.elapsed_time(e) / 1e3) / 1e9)")
echo "copy bandwidth ${copy} GB/s" | tee "$OUT/copy.txt"
port=30111
for cfg in llama-2-13b llama-3-8b; do
  for kv in auto fp8_e5m2 fp8_e4m3; do
    log="$OUT/server_${cfg}_${kv}.log"
    "$B" serve --device cuda --model-path "$S/configs/$cfg.json" --load-format dummy \
      --tokenizer-path "$S/models/llama2-tokenizer" --disable-radix-cache --kv-cache-dtype "$kv" \
      --max-running-requests 512 --cuda-graph-max-bs 256 --port "$port" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.5; done
    for ds in sharegpt random; do
      if [[ $ds == sharegpt ]]; then
        args=(--dataset-name sharegpt --dataset-path "$S/data/sharegpt/ShareGPT_V3_filtered_500.json" --request-rate 128)
      else
        args=(--dataset-name random --random-input-len 1024 --random-output-len 512 --random-range-ratio 0.5 --request-rate inf)
      fi
      before=$(curl -s "localhost:$port/get_server_info")
      "$B" bench-serving --backend sglang --port "$port" --tokenizer "$S/models/llama2-tokenizer" --num-prompts "$N" \
        --seed 1 "${args[@]}" --output-file "$OUT/client_${cfg}_${kv}_${ds}.jsonl" \
        >"$OUT/client_${cfg}_${kv}_${ds}.txt" 2>/dev/null
      after=$(curl -s "localhost:$port/get_server_info")
      python3 - "$cfg" "$kv" "$ds" "$copy" "$OUT/client_${cfg}_${kv}_${ds}.jsonl" "$before" "$after" <<'PY' | tee -a "$OUT/seed_experiment.jsonl"
import json, sys
cfg, kv, ds, copy, client, before, after = sys.argv[1:8]
c = json.loads(open(client).read().splitlines()[-1])
b, a = json.loads(before), json.loads(after)
steps = a["decode_steps"] - b["decode_steps"]
secs = a["decode_seconds"] - b["decode_seconds"]
kv_bytes = (a["decode_kv_tokens"] - b["decode_kv_tokens"]) * a["kv_bytes_per_token"]
mbu = (a["weight_bytes"] * steps + kv_bytes) / secs / (float(copy) * 1e9) if secs > 0 else 0.0
print(json.dumps({"model": cfg, "kv_cache_dtype": a["kv_cache_dtype"], "dataset": ds, "request_throughput": c["request_throughput"],
                  "output_throughput": c["output_throughput"], "median_ttft_ms": c["median_ttft_ms"],
                  "median_itl_ms": c["median_itl_ms"], "pool_tokens": a["max_total_num_tokens"],
                  "peak_running": a["peak_running"], "decode_steps": steps, "mean_decode_step_ms": 1e3 * secs / max(steps, 1),
                  "decode_mbu": mbu, "copy_gb_per_s": float(copy), "client": c}))
PY
    done
    kill -TERM "$pid"; wait "$pid"
    port=$((port + 1))
  done
done

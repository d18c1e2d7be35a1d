#!/usr/bin/env bash
# The serving experiment on the GPU machine: for Llama-2-13B and Llama-3-8B (dummy weights,
# --disable-radix-cache) and each KV dtype (bf16, fp8_e5m2, fp8_e4m3), a server and then two client
# runs against it, one after the other on the same machine:
#   sharegpt  ShareGPT prompts cycled to N, outputs uniform in [1, 512] (seed 1), --request-rate 128
#   random    1024 in / 512 out, --random-range-ratio 0.5, N prompts, --request-rate inf
# After each run, /get_server_info gives the pool size, the peak number of running requests and the
# decode steps' time and KV tokens, from which the decode model-bandwidth utilization follows
# against the device copy bandwidth measured here first (torch): (weight bytes read + KV bytes
# read) / decode step time / copy bandwidth, over all decode steps and over those of >= 64 rows.
#
# Internal to scripts/gpu.sh: `scripts/gpu.sh seed [N]`, serve8 and the data from the pack. A
# GPU job ends within 600 s and all six runs of Llama-2-13B take ~8-10 min, so split the
# models over two commands, the second right after the first while the machine is warm:
#   SEED_MODELS="llama-2-13b:auto,fp8_e5m2" bash scripts/gpu.sh seed
#   SEED_MODELS="llama-3-8b llama-2-13b:fp8_e4m3" bash scripts/gpu.sh seed
# then here: python3 bench/seed_report.py A/seed_experiment.jsonl B/seed_experiment.jsonl
# CPU dry run (tiny configs of the same names, short random lengths): SEED_DEVICE=cpu SEED_BIN=...
# SEED_SHARED=../shared SEED_CONFIG_DIR=DIR SEED_RANDOM_ARGS="--dataset-name random
# --random-input-len 128 --random-output-len 64 --random-range-ratio 0.5 --request-rate inf"
# bash scripts/gpu.sh seed 8
# Args: [N=1000] prompts per run. Environment (defaults in brackets):
#     SEED_MODELS      [llama-2-13b llama-3-8b]  config names in the configs folder, each MODEL or
#                      MODEL:KV,KV to run that model with those KV dtypes only
#     SEED_KV          [auto fp8_e5m2 fp8_e4m3]  --kv-cache-dtype values
#     SEED_DATASETS    [sharegpt random]
#     SEED_DEVICE      [cuda]
#     SEED_DEADLINE_S  [560]   time budget from the script's start: a run that would not end before it
#                              is skipped (and said so), a client still running 15 s before it is
#                              stopped, so the command always ends with its results written
#     SEED_SERVER_ARGS [cuda: --mem-fraction-static 0.88 --max-running-requests 1024 --cuda-graph-max-bs 256]
#     SEED_QUANT       [none]  --quantization for every server (fp8: e4m3 weights); recorded per run
#     SEED_MODEL_ARGS  [--model-path CONFIGS/{model}.json --load-format dummy --tokenizer-path TOKENIZER]
#                      ({model} is replaced by the model's name), e.g. stories260K on the CPU
#     SEED_CONFIG_DIR  [SHARED/configs]
#     SEED_TOKENIZER   [SHARED/models/llama2-tokenizer]  the client's; empty: none (random-ids only)
#     SEED_SHAREGPT_ARGS, SEED_RANDOM_ARGS  the client's dataset and rate arguments (defaults above)
#     SEED_BIN, SEED_SHARED  a serve8 binary and shared folder to use instead of the pack's
#     SEED_COPY_GBPS   skip the copy measurement and use this bandwidth
#     SEED_TAG         [SEED_MODELS, spelled for a file name]  names the summary and the logs archive
# $OUT receives seed_experiment.jsonl (one line per run, appended as each ends),
# seed_summary_TAG.txt and seed_logs_TAG.tgz (server logs, client outputs, /get_server_info samples).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
N="${1:-1000}"
OUT="${OUT:-/tmp/seed-out}"
DEVICE="${SEED_DEVICE:-cuda}"
DEADLINE="${SEED_DEADLINE_S:-560}"
read -ra MODELS <<<"${SEED_MODELS:-llama-2-13b llama-3-8b}"
read -ra KVS <<<"${SEED_KV:-auto fp8_e5m2 fp8_e4m3}"
read -ra DATASETS <<<"${SEED_DATASETS:-sharegpt random}"
TAG="${SEED_TAG:-$(echo "${MODELS[*]}" | sed 's/ /_/g; s/:/./g; s/,/-/g; s/[^A-Za-z0-9._-]/_/g')}"
TAG="${TAG:-run}"
H="$root/scripts/seed_experiment.py"
mkdir -p "$OUT"
W="${TMPDIR:-/tmp}/serve8-seed-work/$TAG"
rm -rf "$W" && mkdir -p "$W"
SUMMARY="$OUT/seed_summary_$TAG.txt"
: >"$SUMMARY"
say() { echo "[seed $(printf '%4d' "$SECONDS") s] $*" | tee -a "$SUMMARY"; }
left() { echo $((DEADLINE - SECONDS)); }

server_pid="" poll_pid=""
# Running, and not a zombie (an exited child the shell has not reaped yet still answers kill -0).
alive() { kill -0 "$1" 2>/dev/null && [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]; }
stop_poll() { [[ -n "$poll_pid" ]] && kill "$poll_pid" 2>/dev/null && wait "$poll_pid" 2>/dev/null; poll_pid=""; }
stop_server() {  # [now]: SIGKILL at once (a server that never came up may ignore SIGTERM)
  [[ -n "$server_pid" ]] || return 0
  if [[ -z "${1:-}" ]]; then
    kill -TERM "$server_pid" 2>/dev/null
    for _ in $(seq 60); do alive "$server_pid" || break; sleep 0.5; done
  fi
  if alive "$server_pid"; then
    say "server $server_pid did not stop in 30 s after SIGTERM: SIGKILL"
    kill -KILL "$server_pid" 2>/dev/null
  fi
  wait "$server_pid" 2>/dev/null
  server_pid=""
}
pack_logs() { tar -C "$W" -czf "$OUT/seed_logs_$TAG.tgz" . 2>/dev/null; }
finish() {
  stop_poll
  stop_server
  pack_logs
}
trap finish EXIT
trap 'say "interrupted"; exit 130' INT TERM

# serve8 and the shared files: the pack's unless SEED_BIN names a binary.
if [[ -n "${SEED_BIN:-}" ]]; then
  B="$SEED_BIN"
  S="${SEED_SHARED:-$root/../shared}"
  git_hash="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown) (SEED_BIN $B)"
else
  source "$root/scripts/gpu/lib.sh"
  gpu_unpack || { say "no pack to run from"; exit 1; }
  # serve8 behind a wrapper that adds the pack's libraries, which the Python here must not see.
  B="$GPU_STAGE/run/serve8"
  S="${SEED_SHARED:-$GPU_STAGE/shared}"
  git_hash="$(tr '\n' ' ' <"$GPU_STAGE/GIT_HASH")"
fi
CONFIGS="${SEED_CONFIG_DIR:-$S/configs}"
TOK="${SEED_TOKENIZER-$S/models/llama2-tokenizer}"
SHAREGPT="$S/data/sharegpt/ShareGPT_V3_filtered_500.json"
if [[ "$DEVICE" == cuda ]]; then
  # The pool, not the batch cap, should bound the batch (N = 1000 requests); graphs up to 256 rows.
  default_server_args="--mem-fraction-static 0.88 --max-running-requests 1024 --cuda-graph-max-bs 256"
else
  default_server_args="--max-running-requests 1024"
fi
read -ra SERVER_ARGS <<<"${SEED_SERVER_ARGS:-$default_server_args} --quantization ${SEED_QUANT:-none}"
read -ra SHAREGPT_ARGS <<<"${SEED_SHAREGPT_ARGS:---dataset-name sharegpt --dataset-path $SHAREGPT --request-rate 128}"
read -ra RANDOM_ARGS <<<"${SEED_RANDOM_ARGS:---dataset-name random --random-input-len 1024 --random-output-len 512 --random-range-ratio 0.5 --request-rate inf}"
TOK_ARGS=()
[[ -n "$TOK" ]] && TOK_ARGS=(--tokenizer "$TOK")

say "serve8 ${git_hash}; models ${MODELS[*]}; KV ${KVS[*]}; datasets ${DATASETS[*]}; N=$N; device $DEVICE; deadline ${DEADLINE} s"
[[ -x "$B" ]] || { say "no serve8 binary at $B"; exit 1; }
for f in ${TOK:+"$TOK"} "${SHAREGPT_ARGS[@]}"; do
  [[ "$f" == /* && ! -e "$f" ]] && say "missing: $f"
done
[[ "$DEVICE" == cuda ]] && command -v nvidia-smi >/dev/null &&
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee -a "$SUMMARY"

if [[ -n "${SEED_COPY_GBPS:-}" ]]; then
  copy="$SEED_COPY_GBPS"
else
  copy=$(python3 "$H" copybw "$DEVICE" 2>>"$W/copybw.err")
fi
say "copy bandwidth (read + write) ${copy} GB/s on $DEVICE"

# Seconds each phase took, per model: the next one's estimate. A dataset keeps its fastest run over
# the KV dtypes so far (bf16 runs longest: its estimate skipped int4 runs that would have fit); a
# run that proves longer is cut at the deadline and recorded as such.
declare -A took
est() { echo "${took[$1]:-0}"; }

# One JSON line per run into $OUT/seed_experiment.jsonl (and the summary).
record() {  # model kv ds status client_rc wall_s error
  local m="$1" kv="$2" ds="$3" st="$4" rc="$5" wall="$6" err="$7" p="$W/${1}_${2}_${3}"
  local line
  line=$(python3 "$H" row "$m" "$kv" "$ds" "$st" "$rc" "$wall" "$p.client.jsonl" "$p.before.json" "$p.after.json" \
    "$p.poll.jsonl" "$copy" "$DEVICE" "${SERVER_ARGS[*]}" "$git_hash" "$err") || {
    say "$m $kv $ds: could not compose the result line"
    return
  }
  echo "$line" >>"$OUT/seed_experiment.jsonl"
  python3 "$H" line "$line" | while read -r l; do say "$l"; done
}

# The last lines of bench-serving's stderr but its progress bar.
client_errors() { tr '\r' '\n' <"$1" | grep -vE '^\[[# ]*\] *[0-9]+/[0-9]+' | grep -v '^$' | tail -n 3 | tr '\n' ' '; }

port=30111
skipping=""
for spec in "${MODELS[@]}"; do
  # MODEL or MODEL:KV,KV (those KV dtypes for this model instead of SEED_KV's).
  m="${spec%%:*}"
  if [[ "$spec" == *:* ]]; then IFS=, read -ra kvs <<<"${spec#*:}"; else kvs=("${KVS[@]}"); fi
  if [[ -n "${SEED_MODEL_ARGS:-}" ]]; then
    read -ra MODEL_ARGS <<<"${SEED_MODEL_ARGS//\{model\}/$m}"
  else
    MODEL_ARGS=(--model-path "$CONFIGS/$m.json" --load-format dummy ${TOK:+--tokenizer-path "$TOK"})
  fi
  cfg=""
  for ((i = 0; i < ${#MODEL_ARGS[@]}; i++)); do
    [[ "${MODEL_ARGS[$i]}" == --model-path || "${MODEL_ARGS[$i]}" == --model ]] && cfg="${MODEL_ARGS[$((i + 1))]:-}"
  done
  if [[ -z "$cfg" || ! -e "$cfg" ]]; then
    say "$m: model path '${cfg}' does not exist: its runs are skipped"
    for kv in "${kvs[@]}"; do for ds in "${DATASETS[@]}"; do
      record "$m" "$kv" "$ds" missing_model "" 0 "no model at $cfg"
    done; done
    continue
  fi
  for kv in "${kvs[@]}"; do
    tag="${m}_${kv}"
    # Start a server only when the last block of this model (start and every dataset) would still
    # fit; the first block of a model starts while 50 s are left.
    need=$(($(est "$m:start") + $(est "$m:sharegpt") + $(est "$m:random")))
    ((need < 45)) && need=45
    if [[ -n "$skipping" ]] || (($(left) < need * 11 / 10)); then
      [[ -n "$skipping" ]] || say "deadline: $(left) s left, a block of $m needs ~$need s: skipping the rest"
      skipping=1
      for ds in "${DATASETS[@]}"; do
        say "SKIPPED $m $kv $ds (deadline)"
        record "$m" "$kv" "$ds" skipped_deadline "" 0 "not run: the ${DEADLINE} s budget was nearly spent"
      done
      continue
    fi
    log="$W/server_$tag.log"
    url="http://127.0.0.1:$port"
    t_start=$SECONDS
    "$B" serve --device "$DEVICE" "${MODEL_ARGS[@]}" --disable-radix-cache --kv-cache-dtype "$kv" \
      "${SERVER_ARGS[@]}" --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
    server_pid=$!
    wait_s=$(($(left) - 30))
    ((wait_s > ${SEED_START_TIMEOUT_S:-300})) && wait_s=${SEED_START_TIMEOUT_S:-300}
    python3 "$H" wait "$url" "$server_pid" "$wait_s"
    up=$?
    took[$m:start]=$((SECONDS - t_start))
    if ((up != 0)); then
      why="exited"
      ((up == 2)) && why="did not answer /health in $wait_s s"
      say "SERVER FAILED $m $kv: $why; the log's tail:"
      tail -n 40 "$log" | sed 's/^/    /' | tee -a "$SUMMARY"
      stop_server now
      for ds in "${DATASETS[@]}"; do record "$m" "$kv" "$ds" server_failed "" 0 "server $why"; done
      port=$((port + 1))
      pack_logs
      continue
    fi
    say "$m $kv: server up in ${took[$m:start]} s ($(grep -hoE 'KV pool: [^;]*' "$log" | head -1))"
    for ds in "${DATASETS[@]}"; do
      p="$W/${tag}_${ds}"
      if ! alive "$server_pid"; then
        say "SERVER DIED $m $kv before $ds; the log's tail:"
        tail -n 40 "$log" | sed 's/^/    /' | tee -a "$SUMMARY"
        record "$m" "$kv" "$ds" server_failed "" 0 "server exited before this run"
        continue
      fi
      e=$(est "$m:$ds")
      if (($(left) < e * 115 / 100 + 20)); then
        say "SKIPPED $m $kv $ds (deadline: $(left) s left, the last $ds run of $m took $e s)"
        record "$m" "$kv" "$ds" skipped_deadline "" 0 "not run: the ${DEADLINE} s budget was nearly spent"
        skipping=1
        continue
      fi
      if [[ $ds == sharegpt ]]; then args=("${SHAREGPT_ARGS[@]}"); else args=("${RANDOM_ARGS[@]}"); fi
      python3 "$H" info "$url" >"$p.before.json"
      python3 "$H" poll "$url" "$p.poll.jsonl" "${SEED_POLL_S:-0.5}" &
      poll_pid=$!
      t_run=$SECONDS
      limit=$(($(left) - 15))
      timeout -s TERM -k 5 "$limit" "$B" bench-serving --backend sglang --base-url "$url" "${TOK_ARGS[@]}" \
        --num-prompts "$N" --seed 1 "${args[@]}" --output-file "$p.client.jsonl" >"$p.client.txt" 2>"$p.client.err"
      rc=$?
      wall=$((SECONDS - t_run))
      stop_poll
      python3 "$H" info "$url" >"$p.after.json"
      (($(est "$m:$ds") == 0 || wall < $(est "$m:$ds"))) && took[$m:$ds]=$wall
      st=ok err=""
      if ((rc == 124 || rc == 137)); then
        st=client_timeout err="bench-serving stopped after $limit s (deadline)"
        skipping=1
      elif [[ ! -s "$p.client.jsonl" ]]; then
        st=client_failed err="bench-serving rc=$rc: $(client_errors "$p.client.err")"
      elif ((rc != 0)); then
        st=partial err="bench-serving rc=$rc: $(client_errors "$p.client.err")"
      fi
      if ! alive "$server_pid"; then
        say "SERVER DIED $m $kv during $ds; the log's tail:"
        tail -n 40 "$log" | sed 's/^/    /' | tee -a "$SUMMARY"
        [[ "$st" == ok ]] && st=partial
        err="the server exited during the run; $err"
      fi
      [[ "$st" == ok ]] || say "$m $kv $ds: $st: $err"
      record "$m" "$kv" "$ds" "$st" "$rc" "$wall" "$err"
    done
    t_stop=$SECONDS
    stop_server
    say "$m $kv: server stopped in $((SECONDS - t_stop)) s"
    port=$((port + 1))
    pack_logs
  done
done
say "done"

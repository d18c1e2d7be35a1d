#!/usr/bin/env bash
# End-to-end checks of the CUDA engine on a GPU machine (issue #3's figures), from a serve8 built
# here and staged with what it needs in .carry/e2e (the GPU machine has no Debian -dev packages and
# no network):
#
#   scripts/gpu_e2e.sh pack              here: build serve8 with CUDA, stage it with its non-CUDA
#                                        shared libraries, the stories260K checkpoint and golden ids,
#                                        configs, the Llama-2 tokenizer and the test clients' wheels
#   scripts/gpu_e2e.sh run [STEP...]     there (device tool, carry [".carry/e2e"]); STEPs, default all:
#     golden  stories260K greedy ids on the GPU (fp32 compute, generic head-dim-8 kernel) vs run.c's
#     hf      logits and greedy ids vs HF transformers, 2-layer Llama-3-8B / Llama-2-7B / Llama-3.1-8B
#     hf32    the same with serve8 in fp32 (--dtype float32): exact agreement expected
#     kvfp8   that Llama-3-8B with fp8_e5m2 / fp8_e4m3 KV against bf16 KV: mean KLD and top-1
#     bench   bench-one-batch, Llama-2-7B dummy weights, batch 1/16/64, 512-token prompts
#     http    the HTTP tests of tests/server against `serve8 serve --device cuda`, Llama-2-7B dummy
# Logs and results go to $OUT.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
E="$root/.carry/e2e"

pack() {
  set -e
  local build="${SERVE8_E2E_BUILD:-$root/build}" shared="$root/../shared"
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVE8_WERROR=ON \
    -DCMAKE_USER_MAKE_RULES_OVERRIDE_CUDA="$root/src/backend/cuda/cuda20_rules.cmake" >/dev/null
  ninja -C "$build" -j"${SERVE8_JOBS:-2}" serve8
  rm -rf "$E" && mkdir -p "$E/lib" "$E/shared/models/stories260K" "$E/shared/golden/stories260K" "$E/shared/configs"
  cp "$build/src/cli/serve8" "$E/serve8" && strip --strip-debug "$E/serve8"
  ldd "$build/src/cli/serve8" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    case "$name" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
      libcuda.so*|libcudart.so*|libcublas*.so*|libnvidia*) ;;
      *) cp -L "$path" "$E/lib/$name" ;;
    esac
  done
  cp "$shared/models/stories260K/stories260K.bin" "$E/shared/models/stories260K/"
  cp "$shared/golden/stories260K/greedy.json" "$E/shared/golden/stories260K/"
  cp -r "$shared/models/llama2-tokenizer" "$E/shared/models/"
  cp "$shared"/configs/{llama-2-7b,llama-3-8b,llama-3.1-8b}.json "$E/shared/configs/"
  # pytest, requests and openai for the GPU machine's Python 3.12.
  local py="$root/.carry/pydeps"
  if [[ ! -f "$root/.carry/pydeps.tar.xz" ]]; then
    rm -rf "$py"
    pip install -q --target "$py" --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 \
      --implementation cp pytest requests openai
    find "$py" -name __pycache__ -type d -exec rm -rf {} +
    tar -C "$root/.carry" -cJf "$root/.carry/pydeps.tar.xz" pydeps
  fi
  cp "$root/.carry/pydeps.tar.xz" "$E/"
  git -C "$root" rev-parse HEAD >"$E/GIT_HASH"
  git -C "$root" diff --quiet HEAD || echo "(+ uncommitted changes)" >>"$E/GIT_HASH"
  # A call carries at most 64 MiB: one compressed archive.
  tar -C "$E" -cJf "$root/.carry/e2e.tar.xz" . && rm -rf "$E" && mkdir -p "$E" && mv "$root/.carry/e2e.tar.xz" "$E/"
  du -sh "$E"
}

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
  # The 2-layer Llama-3-8B of `hf` with FP8 KV against its bf16-KV run (issue #4): mean KLD, top-1.
  local cfg=llama-3-8b d="/tmp/hf_llama-3-8b"
  [[ -f "$d/forced.txt" ]] || python3 "$root/scripts/hf_compare.py" build "$E/shared/configs/$cfg.json" 2 "$d" \
    >>"$OUT/log.txt" 2>&1
  for kv in bf16 fp8_e5m2 fp8_e4m3; do
    "$B" dump-logits --device cuda --kv-cache-dtype "$kv" --model-path "$d" --prompts-file "$d/forced.txt" \
      --decode-tokens 32 --greedy-tokens 0 --max-total-tokens 4096 --output "$OUT/kv_$kv" >>"$OUT/log.txt" 2>&1
  done
  for kv in fp8_e5m2 fp8_e4m3; do
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

http() {
  tar -C /tmp -xJf "$E/pydeps.tar.xz"
  export PYTHONPATH="/tmp/pydeps${PYTHONPATH:+:$PYTHONPATH}"
  export SERVE8_BIN="$B" SERVE8_SHARED_DIR="$E/shared" SERVE8_TEST_SERVER_ARGS="--device cuda --max-total-tokens 65536"
  export SERVE8_TEST_TEXT_MODEL="--model-path $E/shared/configs/llama-2-7b.json --load-format dummy --tokenizer-path $E/shared/models/llama2-tokenizer"
  for suite in ${SERVE8_HTTP_SUITES:-api errors policy load}; do
    timeout "${SERVE8_HTTP_TIMEOUT:-240}" python3 -m pytest -q -p no:cacheprovider "$root/tests/server/test_$suite.py" \
      >"$OUT/http_$suite.txt" 2>&1
    echo "tests/server/test_$suite.py on cuda (Llama-2-7B dummy + stories260K): rc=$? $(tail -1 "$OUT/http_$suite.txt")"
  done | tee "$OUT/http_summary.txt"
}

case "${1:-}" in
  pack) pack ;;
  run)
    shift
    # The device tool brings back only a few files from $OUT: work elsewhere, then put one archive
    # and the summaries there.
    final="${OUT:-/tmp/serve8-e2e-out}"
    OUT="${TMPDIR:-/tmp}/serve8-e2e-work"
    rm -rf "$OUT" && mkdir -p "$OUT" "$final"
    packed="$E/e2e.tar.xz"
    E="${TMPDIR:-/tmp}/serve8-e2e"
    rm -rf "$E" && mkdir -p "$E" && tar -C "$E" -xJf "$packed"
    export LD_LIBRARY_PATH="$E/lib:${LD_LIBRARY_PATH:-}"
    export SERVE8_GIT_HASH="$(head -1 "$E/GIT_HASH")"
    B="$E/serve8"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$OUT/gpu.txt"
    cp "$E/GIT_HASH" "$OUT/"
    steps=("$@")
    [[ ${#steps[@]} -gt 0 ]] || steps=(golden hf bench http)
    for s in "${steps[@]}"; do
      echo "== $s" | tee -a "$OUT/log.txt"
      "$s"
    done
    tar -C "$OUT" -czf "$final/results.tgz" .
    cp "$OUT"/*_summary.txt "$final/" 2>/dev/null || true
    ;;
  *) echo "usage: scripts/gpu_e2e.sh pack | run [golden|hf|bench|http ...]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan, SERVE8_FUZZ=ON, CPU only)
# in build-fuzz/ and runs each for FUZZ_SECONDS (default 20) on a fresh copy of its seed corpus
# (tests/fuzz/corpus/<target>; tests/fuzz/<target>.dict is its dictionary where one exists).
# Prints one summary line per target; exits non-zero when any target finds a crash, sanitizer
# report, uncaught exception, timeout or OOM. Logs go to build-fuzz/fuzz-logs/, reproducers to
# build-fuzz/fuzz-artifacts/<target>/ (rerun one with: build-fuzz/tests/fuzz/<target> <file>).
#
#   FUZZ_SECONDS=600 scripts/fuzz.sh                 # the recorded long run
#   FUZZ_TARGETS="fuzz_gguf fuzz_safetensors" scripts/fuzz.sh
#   FUZZ_PARALLEL=2 scripts/fuzz.sh                  # run two targets at a time
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-20}
PARALLEL=${FUZZ_PARALLEL:-1}
read -ra TARGETS <<<"${FUZZ_TARGETS:-fuzz_safetensors fuzz_gguf fuzz_gguf_vocab fuzz_request_json fuzz_tokenizer fuzz_tool_calls}"
source scripts/sanitized_build.sh
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# run_one TARGET: fuzzes it, writes its log and a one-line summary under $BUILD/fuzz-logs/.
run_one() {
  local t=$1 seeds=tests/fuzz/corpus/$1 work=$BUILD/fuzz-corpus/$1 art=$BUILD/fuzz-artifacts/$1
  local log=$BUILD/fuzz-logs/$t.log
  rm -rf "$work" "$art" "$log.rerun"
  mkdir -p "$work" "$art" "$BUILD/fuzz-logs"
  [[ -d $seeds ]] && cp -r "$seeds"/. "$work"/
  local rc=0 dict=()
  [[ -f tests/fuzz/$t.dict ]] && dict=(-dict="tests/fuzz/$t.dict")
  "$BUILD/tests/fuzz/$t" "$work" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" >"$log" 2>&1 || rc=$?
  # A timeout whose input then runs well inside the limit on its own was the machine stalling
  # (shared CI runners), not a hang: it is reported as flaky_timeouts, not as a crash.
  local crashes=0 flaky=0 f
  for f in "$art"/*; do
    [[ -f $f ]] || continue
    if [[ $(basename "$f") == timeout-* ]] && "$BUILD/tests/fuzz/$t" -timeout=10 -runs=1 "$f" >>"$log.rerun" 2>&1; then
      flaky=$((flaky + 1))
    else
      crashes=$((crashes + 1))
    fi
  done
  if ((rc != 0 && crashes + flaky == 0)); then crashes=1; fi  # died without writing a reproducer
  # libFuzzer's final stats (stat::number_of_executed_units etc.) and its last status line.
  local execs rate corp
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1) || true
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1) || true
  corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1 | cut -d' ' -f2) || true  # none when it dies on a seed
  printf '%-18s execs=%s exec/s=%s corpus=%s crashes=%d flaky_timeouts=%d rc=%d seconds=%s log=%s\n' "$t" \
    "${execs:-?}" "${rate:-?}" "${corp:-?}" "$crashes" "$flaky" "$rc" "$SECONDS_PER_TARGET" "$log" \
    >"$BUILD/fuzz-logs/$t.summary"
}

for t in "${TARGETS[@]}"; do
  run_one "$t" &
  while (($(jobs -rp | wc -l) >= PARALLEL)); do wait -n || true; done
done
wait

status=0
for t in "${TARGETS[@]}"; do
  cat "$BUILD/fuzz-logs/$t.summary"
  if ! grep -q ' crashes=0 ' "$BUILD/fuzz-logs/$t.summary"; then
    status=1
    grep -m1 -A12 -E '^==[0-9]+==ERROR|runtime error|terminate called|deadly signal|ERROR: libFuzzer' \
      "$BUILD/fuzz-logs/$t.log" || true
  fi
done
exit $status

#!/usr/bin/env bash
# FlashInfer's paged attention against ours on bench/attention's grid, on the GPU machine (no
# network): bench/peer/README.md says what is measured. Internal to scripts/gpu.sh:
#
#   scripts/gpu.sh peer [STEP...]   steps, default: install jit ours fi compare
#     install  installs the pack's FlashInfer wheels (wheels/peer, bench/peer/wheels.txt) into
#              /tmp/serve8-peer/py, on PYTHONPATH; packages the machine already imports are left alone
#     jit      JIT-compiles the FlashInfer modules the grid needs (nvcc, sm_90a), one process per
#              module in parallel; times each (jit.txt)
#     ours     the pack's bench_attention on the same grid
#     fi       bench/peer/flashinfer_bench.py
#     compare  bench/peer/compare.py: compare.md (table) and peer_h200.png
#     profile  (not by default) Nsight Compute counters of both sides' kernels on PROFILE_FILTERS'
#              labels: profile.md (bench/peer/profile_summary.py)
# Everything lands in $OUT: peer_results.tgz (all logs and JSON) and, beside it, compare.md,
# peer_h200.png, flashinfer_bench.json, attention_bench.json, summary.txt.
#
# Work and caches live in /tmp/serve8-peer and outlast a command while the machine stays warm: the
# JIT cache (FLASHINFER_WORKSPACE_BASE), the installed wheels, and each step's results. A step
# whose result is there is skipped (PEER_FRESH=1 redoes them), so when a command runs out of time
# in the JIT, the same command again goes on where it stopped (ninja keeps the finished objects).
#
# Environment:
#   PEER_QUICK=1        bench_attention's --quick grid (decode B 1/64 x ctx 512/4096, prefill 2048,
#                       extend 4x512 over 2048) on both sides
#   PEER_FILTER='A;B'   --filter A --filter B on both sides (';'-separated substrings of the label
#                       "heads kind B=.. q=.. kv=.. kv_dtype"), e.g. 'decode' or 'fp8'
#   PEER_REPS=10        timed reps per case (median)
#   PEER_DEADLINE_S=570 seconds from the start after which no step starts and running ones stop
#   PEER_JIT_JOBS=3     ninja jobs per module build (MAX_JOBS); modules build in parallel
#   PEER_FRESH=1        redo every step
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/scripts/gpu/lib.sh"
t0=$(date +%s)
deadline=${PEER_DEADLINE_S:-570}
base=/tmp/serve8-peer
W="$base/work"
final="${OUT:-/tmp/serve8-gpu-out}"
mkdir -p "$W" "$final"
[[ "${PEER_FRESH:-0}" == 1 ]] && rm -rf "$W" && mkdir -p "$W"
export FLASHINFER_WORKSPACE_BASE="$base" TVM_FFI_CACHE_DIR="$base/tvm-ffi"
export FLASHINFER_CUDA_ARCH_LIST="${FLASHINFER_CUDA_ARCH_LIST:-9.0a}"
export PYTHONPATH="$base/py${PYTHONPATH:+:$PYTHONPATH}" PATH="$base/py/bin:$PATH"
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"

grid=()
[[ "${PEER_QUICK:-0}" == 1 ]] && grid+=(--quick)
if [[ -n "${PEER_FILTER:-}" ]]; then
  IFS=';' read -ra fs <<<"$PEER_FILTER"
  for f in "${fs[@]}"; do grid+=(--filter "$f"); done
fi
reps=(--reps "${PEER_REPS:-10}")

left() { echo $((deadline - ($(date +%s) - t0))); }
# A timeout for a command that must end MARGIN seconds before the deadline (at least 1 s: 0 would
# mean none).
tl() { local t=$(($(left) - $1)); echo $((t < 1 ? 1 : t)); }
log() { echo "[$(($(date +%s) - t0))s] $*" | tee -a "$W/summary.txt"; }

results() {
  cp -f "$W"/compare.md "$W"/peer_h200.png "$W"/flashinfer_bench.json "$W"/attention_bench.json "$W"/summary.txt \
    "$final/" 2>/dev/null
  tar -C "$W" -czf "$final/peer_results.tgz" . 2>/dev/null
  ls -la "$final"
}
trap results EXIT

install() {
  unpack_ours || return 1
  local wh="$GPU_STAGE/wheels/peer" stamp="$base/py/.installed"
  [[ -f "$wh/SHA256SUMS" ]] || { log "install: the pack holds no FlashInfer wheels (its pack step had no PyPI)"; return 1; }
  if [[ -f "$stamp" ]] && cmp -s "$stamp" "$wh/SHA256SUMS"; then log "install: already there"; import_check; return; fi
  (cd "$wh" && sha256sum -c --quiet SHA256SUMS) || { log "install: wheel checksum mismatch"; return 1; }
  rm -rf "$base/py" && mkdir -p "$base/py"
  # Always ours: FlashInfer, its FFI layer, the ninja binary's wheel and the small pure-Python deps
  # that nothing else on the machine brings. The rest only where the machine lacks the module.
  local pick=("$wh"/flashinfer_python-*.whl "$wh"/apache_tvm_ffi-*.whl "$wh"/ninja-*.whl "$wh"/nvidia_ml_py-*.whl
    "$wh"/einops-*.whl "$wh"/click-*.whl "$wh"/tabulate-*.whl)
  local m
  for m in requests:requests urllib3:urllib3 idna:idna certifi:certifi charset_normalizer:charset_normalizer tqdm:tqdm \
    packaging:packaging; do
    if ! python3 -c "import ${m%%:*}" 2>/dev/null; then pick+=("$wh/${m#*:}"-*.whl); fi
  done
  if ! python3 -c "import packaging, sys; from packaging.version import Version as V; sys.exit(V(packaging.__version__) < V('24.2'))" 2>/dev/null; then
    pick+=("$wh"/packaging-*.whl)
  fi
  if python3 -m pip --version >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target "$base/py" "${pick[@]}" 2>&1 | grep -v "WARNING: Running pip as" | tail -5
    ((PIPESTATUS[0] == 0)) || { log "install: pip install failed"; return 1; }
  else  # no pip: a wheel is a zip; its scripts (the ninja binary) go to bin/
    python3 - "$base/py" "${pick[@]}" <<'PY'
import os, sys, zipfile
dst = sys.argv[1]
for w in sys.argv[2:]:
    with zipfile.ZipFile(w) as z:
        for n in z.namelist():
            parts = n.split("/")
            if len(parts) > 2 and parts[0].endswith(".data") and parts[1] == "scripts":
                out = os.path.join(dst, "bin", parts[-1])
                os.makedirs(os.path.dirname(out), exist_ok=True)
                open(out, "wb").write(z.read(n))
                os.chmod(out, 0o755)
            elif not parts[0].endswith(".data"):
                z.extract(n, dst)
PY
  fi
  cp "$wh/SHA256SUMS" "$stamp"
  { nvcc --version | tail -2; which ninja nvcc; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv; } \
    >>"$W/summary.txt" 2>&1
  import_check
}

# The first import may build tvm-ffi's torch DLPack addon (cached in TVM_FFI_CACHE_DIR): once here,
# before the parallel JIT processes would all race to build it.
import_check() {
  local s=$(date +%s)
  python3 -c "import torch, flashinfer, tvm_ffi; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| flashinfer', flashinfer.__version__, '| tvm_ffi', tvm_ffi.__version__)" \
    >"$W/import.log" 2>&1
  local rc=$?
  log "import: rc=$rc in $(($(date +%s) - s)) s: $(tail -1 "$W/import.log")"
  ((rc == 0)) || tail -20 "$W/import.log" | tee -a "$W/summary.txt"
  return $rc
}

jit() {
  [[ -f "$W/jit.done" ]] && { log "jit: done before"; return 0; }
  local mods m pids=() t1
  mods=$(python3 "$root/bench/peer/flashinfer_bench.py" --jit-list "${grid[@]}") || { log "jit: --jit-list failed"; return 1; }
  log "jit: $(echo $mods) with MAX_JOBS=${PEER_JIT_JOBS:-3} each, $(nproc) cores; $(left) s left"
  t1=$(date +%s)
  echo "== $(date -u +%H:%M:%S) $(left) s left" >>"$W/jit.txt"
  for m in $mods; do
    (
      s=$(date +%s)
      MAX_JOBS=${PEER_JIT_JOBS:-3} timeout "$(tl 20)" python3 "$root/bench/peer/flashinfer_bench.py" --jit "$m" \
        >"$W/jit_${m/:/_}.log" 2>&1
      echo "$m rc=$? $(($(date +%s) - s)) s" >>"$W/jit.txt"
    ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  local this ok=1
  this=$(sed -n '/^==/h; /^==/!H; ${x;p}' "$W/jit.txt" | grep -v '^==')  # this run's lines
  log "jit: $(($(date +%s) - t1)) s wall: $(echo "$this" | sort | tr '\n' ';')"
  # rc 124/137: stopped by the deadline (run it again); any other failure is kept in jit_failed.txt,
  # and flashinfer_bench.py records those variants as not built instead of trying again.
  : >"$W/jit_failed.txt"
  for m in $mods; do
    if echo "$this" | grep -q "^$m rc=0"; then continue; fi
    if echo "$this" | grep -qE "^$m rc=(124|137) "; then ok=0; else echo "$m" >>"$W/jit_failed.txt"; fi
    tail -5 "$W/jit_${m/:/_}.log" | tee -a "$W/summary.txt"
  done
  if ((ok)); then touch "$W/jit.done"; else log "jit: not finished before the deadline: run the same command again"; fi
  du -sh "$base/.cache/flashinfer" 2>/dev/null | tee -a "$W/summary.txt"
}

unpack_ours() {
  gpu_unpack || { log "ours: no pack to run from (scripts/gpu.sh pack)"; return 1; }
}

ours() {
  [[ -f "$W/attention_bench.json" ]] && { log "ours: done before"; return 0; }
  unpack_ours || return 1
  with_pack_libs timeout "$(tl 5)" "$GPU_STAGE/bin/bench_attention" --out "$W/attention_bench.json.tmp" "${grid[@]}" "${reps[@]}" \
    >"$W/attention_bench.txt" 2>&1
  local rc=$?
  [[ -f "$W/attention_bench.json.tmp" ]] && mv "$W/attention_bench.json.tmp" "$W/attention_bench.json"
  log "ours: rc=$rc ($(tail -1 "$W/attention_bench.txt"))"
}

fi_bench() {
  [[ -f "$W/flashinfer_bench.json" ]] && { log "fi: done before"; return 0; }
  # Without the jit step's modules, plan() would compile them one by one inside the timed run.
  [[ -f "$W/jit.done" || "${PEER_NO_JIT_STEP:-0}" == 1 ]] || { log "fi: the jit step has not finished: run it again"; return 1; }
  local skip
  skip=$(paste -sd, "$W/jit_failed.txt" 2>/dev/null)
  timeout "$(tl 5)" python3 "$root/bench/peer/flashinfer_bench.py" --out "$W/flashinfer_bench.json.tmp" \
    "${grid[@]}" "${reps[@]}" ${skip:+--skip-modules "$skip"} >"$W/flashinfer_bench.txt" 2>&1
  local rc=$?
  [[ -f "$W/flashinfer_bench.json.tmp" ]] && mv "$W/flashinfer_bench.json.tmp" "$W/flashinfer_bench.json"
  log "fi: rc=$rc ($(tail -1 "$W/flashinfer_bench.txt"))"
}

compare() {
  [[ -f "$W/attention_bench.json" && -f "$W/flashinfer_bench.json" ]] || { log "compare: a JSON is missing"; return 1; }
  python3 "$root/bench/peer/compare.py" "$W/attention_bench.json" "$W/flashinfer_bench.json" --png "$W/peer_h200.png" \
    --md "$W/compare.md" >/dev/null 2>"$W/compare.err"
  log "compare: rc=$? $(grep '^FP8 decode' "$W/compare.md" 2>/dev/null)"
}

# Nsight Compute's hardware counters for the kernels of each PROFILE_FILTERS label (';'-separated;
# each should name one row), ours and FlashInfer's (tensor- and CUDA-core decode, their merges),
# one process per label and side, 1 rep; caches flushed before each kernel (ncu's default, as the
# timed runs make the L2 cold). bench/peer/profile_summary.py tables them (profile.md).
# PROFILE_SIDES="ours" leaves FlashInfer's side out (no install or jit step needed);
# PROFILE_NCU_ARGS adds ncu options (e.g. "--cache-control none": caches as the timed run leaves them).
profile() {
  local ncu f i=0 metrics
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  [[ -x "$ncu" ]] || { log "profile: no ncu"; return 1; }
  local sides=" ${PROFILE_SIDES:-ours fi} "
  [[ "$sides" != *" fi "* || -f "$W/jit.done" ]] || { log "profile: the jit step has not finished"; return 1; }
  unpack_ours || return 1
  metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
  metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
  metrics+=,sm__cycles_active.avg,sm__cycles_elapsed.avg,launch__grid_size,launch__block_size
  metrics+=,launch__registers_per_thread,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers
  rm -rf "$W/profile" && mkdir -p "$W/profile"
  IFS=';' read -ra fs <<<"${PROFILE_FILTERS:?PROFILE_FILTERS: labels to profile}"
  for f in "${fs[@]}"; do
    i=$((i + 1))
    echo "$f" >"$W/profile/label_$i.txt"
    [[ "$sides" == *" ours "* ]] && with_pack_libs timeout "$(tl 5)" "$ncu" --clock-control none ${PROFILE_NCU_ARGS:-} \
      --metrics "$metrics" --kernel-name "regex:attention_decode|attention_merge" -f -o "$W/profile/ours_$i" \
      "$GPU_STAGE/bin/bench_attention" --filter "$f" --reps 1 --out "$W/profile/ours_$i.json" >"$W/profile/ours_$i.log" 2>&1
    [[ "$sides" == *" fi "* ]] && timeout "$(tl 5)" "$ncu" --clock-control none ${PROFILE_NCU_ARGS:-} --metrics "$metrics" \
      --kernel-name "regex:BatchDecode|BatchPrefill|MergeStates" -f -o "$W/profile/fi_$i" \
      python3 "$root/bench/peer/flashinfer_bench.py" --filter "$f" --reps 1 --out "$W/profile/fi_$i.json" \
      >"$W/profile/fi_$i.log" 2>&1
    log "profile $i ($f): $(ls "$W/profile" | grep -c "_$i.ncu-rep") reports"
  done
  python3 "$root/bench/peer/profile_summary.py" "$W/profile" --ncu "$ncu" --times "$W" --json "$W/profile.json" \
    --ncu-args "${PROFILE_NCU_ARGS:-}" \
    >"$W/profile.md" 2>"$W/profile.err"
  log "profile: rc=$? ($(wc -l <"$W/profile.md") lines in profile.md)"
  cp -f "$W/profile.md" "$W/profile.json" "$final/" 2>/dev/null
}

steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(install jit ours fi compare)
log "scripts/gpu.sh peer ${steps[*]} (grid: ${grid[*]:-full} ${reps[*]}); deadline ${deadline} s"
for s in "${steps[@]}"; do
  if (($(left) < 30)); then log "$s: not started, $(left) s left (run again: finished steps are kept)"; continue; fi
  case "$s" in
    install) install ;;
    jit) jit ;;
    ours) ours ;;
    fi) fi_bench ;;
    compare) compare ;;
    profile) profile ;;
    *) log "unknown step $s" ;;
  esac
done

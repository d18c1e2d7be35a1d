#!/usr/bin/env python3
"""Constrained decoding's cost at a full batch: `serve8 serve` (dummy weights) with N requests
decoding at once, unconstrained and then under a JSON schema, a regex and an EBNF grammar that
cannot finish inside the output length, so every step of the window masks every row. The decode
counters of /get_server_info over a window at the full batch give the mean step time; throughput
at batch N is N / step time, and each grammar's is reported against the unconstrained one.

  python3 bench/constrained/constrained_bench.py --bin build/src/cli/serve8 \\
      --config ../shared/configs/llama-3-8b.json --tokenizer ../shared/models/llama2-tokenizer \\
      [--requests 64 --input-len 256 --output-len 768 --window 1.0 --out results.jsonl] [-- serve flags]
"""
import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "host"))
from host_step import run_and_measure, start_server  # noqa: E402

# Each needs far more tokens than --output-len to complete, so no request ends inside the window.
GRAMMARS = {
    "none": {},
    "json_schema": {"json_schema": json.dumps({
        "type": "object", "properties": {"items": {"type": "array", "minItems": 2000, "items": {
            "type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["name", "n"]}}}, "required": ["items"]})},
    "regex": {"regex": "[a-z]{1,12}( [a-z]{1,12}){3000}"},
    "regex_chars": {"regex": "[a-z ,.]{4000}"},
    "ebnf": {"ebnf": 'root ::= item{2000}\nitem ::= "(" [a-z]+ " " [0-9]+ ") "'},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=768)
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--port", type=int, default=30125)
    ap.add_argument("--modes", default=",".join(GRAMMARS))
    ap.add_argument("--out", default="")
    ap.add_argument("serve_args", nargs="*")
    a = ap.parse_args()
    cmd = [a.bin, "serve", "--model-path", a.config, "--load-format", "dummy", "--tokenizer-path", a.tokenizer,
           "--port", str(a.port), "--max-running-requests", str(a.requests),
           "--context-length", str(a.input_len + a.output_len + 16), "--disable-radix-cache"] + a.serve_args
    server = start_server(cmd, a.port, "/tmp/constrained_bench.log")
    rows = []
    try:
        rng = random.Random(1)
        prompts = [[rng.randrange(3, 32000) for _ in range(a.input_len)] for _ in range(a.requests)]
        for mode in a.modes.split(","):
            sp = {"max_new_tokens": a.output_len, "temperature": 0, "ignore_eos": True, **GRAMMARS[mode]}
            bodies = [{"input_ids": p, "sampling_params": sp} for p in prompts]
            first, last = asyncio.run(run_and_measure(a.port, bodies, a.window))
            steps = last["decode_steps"] - first["decode_steps"]
            secs = last["decode_seconds"] - first["decode_seconds"]
            host = last["decode_host_seconds"] - first["decode_host_seconds"]
            rows.append({"mode": mode, "window_decode_steps": steps, "mean_step_ms": 1e3 * secs / steps,
                         "host_ms_per_step": 1e3 * host / steps,
                         "tokens_per_s": a.requests * steps / secs, "device": last.get("device", "")})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    base = next((r for r in rows if r["mode"] == "none"), None)
    version = subprocess.run([a.bin, "--version"], capture_output=True, text=True).stdout.split()
    for r in rows:
        r.update({"command": " ".join(cmd), "git_hash": version[-1] if version else "unknown",
                  "date": time.strftime("%Y-%m-%d"), "requests": a.requests, "input_len": a.input_len,
                  "output_len": a.output_len,
                  "throughput_vs_unconstrained": r["tokens_per_s"] / base["tokens_per_s"] if base else None})
        print(f'{r["mode"]:12s} step {r["mean_step_ms"]:7.3f} ms  host {r["host_ms_per_step"]:6.3f} ms  '
              f'{r["tokens_per_s"]:9.0f} tok/s  x{r["throughput_vs_unconstrained"]:.3f}')
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()

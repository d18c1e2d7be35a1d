#!/usr/bin/env python3
"""Host time of a decode step with many long requests: `serve8 serve` on a one-layer dummy model
(bench/host/tiny_long_context.json), so that the device's part of a step is small and what the
host does per step (scheduling, building and uploading the batch) shows in the step time.

N requests of L random prompt ids each, all sent at once, M output tokens each (ignore_eos). Once
all N run (none waits, the last prefill done), /get_server_info's decode counters are read at the
start and end of a short window: the mean step time at a batch of N, and the host share the server
measures (step time minus the time from the forward's launch to the sampled ids).

  python3 bench/host/host_step.py --bin build/src/cli/serve8 [--requests 1024 --input-len 4096
      --output-len 1024 --window 0.5 --label after --out results.jsonl] [-- extra serve flags]
"""
import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
import urllib.request

import aiohttp

HERE = os.path.dirname(os.path.abspath(__file__))


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None  # /health answers 200 with no body


def start_server(cmd, port, log_path):
    """Starts `serve8 serve` (cmd) and waits for /health on `port`; exits naming the log if it dies."""
    log = open(log_path, "w")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            get(f"http://127.0.0.1:{port}/health")
            return server
        except Exception:
            if server.poll() is not None:
                sys.exit(f"serve8 exited with {server.returncode}; see {log_path}")
            time.sleep(0.5)
    server.terminate()
    sys.exit(f"serve8 did not answer /health in 300 s; see {log_path}")


async def run_and_measure(port, bodies, window_s):
    """Sends every body at once; once all are running and none waits, reads the decode counters of
    /get_server_info at the start and end of a window in which the batch is all N requests."""
    url = f"http://127.0.0.1:{port}"
    # A fresh connection per request: reusing one the server is closing for idleness races.
    conn = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
        async def one(i, body):
            async with s.post(f"{url}/generate", json=body) as r:
                out = await r.json()
                if r.status != 200:
                    raise RuntimeError(f"request {i}: HTTP {r.status}: {out}")

        async def info():
            async with s.get(f"{url}/get_server_info") as r:
                return await r.json()

        async def measure():
            n = len(bodies)
            while True:
                first = await info()
                if first["num_running_reqs"] == n and first["num_waiting_reqs"] == 0:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)  # the last admitted prompt's prefill chunks
            first = await info()
            await asyncio.sleep(window_s)
            last = await info()
            if last["num_running_reqs"] != n:
                raise RuntimeError(f"requests finished inside the window ({last['num_running_reqs']} of {n} "
                                   "running): raise --output-len")
            return first, last

        sends = [asyncio.create_task(one(i, b)) for i, b in enumerate(bodies)]
        first, last = await measure()
        await asyncio.gather(*sends)
    return first, last


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--config", default=os.path.join(HERE, "tiny_long_context.json"))
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--input-len", type=int, default=4096)
    ap.add_argument("--output-len", type=int, default=1024)
    ap.add_argument("--window", type=float, default=0.5, help="seconds of steps measured at the full batch")
    ap.add_argument("--port", type=int, default=30123)
    ap.add_argument("--label", default="")
    ap.add_argument("--commit", default="", help="the binary's commit (default: from `serve8 --version`)")
    ap.add_argument("--out", default="")
    ap.add_argument("serve_args", nargs="*")
    a = ap.parse_args()
    ctx = a.input_len + a.output_len + 16
    cmd = [a.bin, "serve", "--model-path", a.config, "--load-format", "dummy", "--port", str(a.port),
           "--max-running-requests", str(a.requests), "--context-length", str(ctx),
           "--max-total-tokens", str(a.requests * (a.input_len + a.output_len) + 1024),
           "--disable-radix-cache"] + a.serve_args
    server = start_server(cmd, a.port, f"/tmp/host_step_{a.label or 'run'}.log")
    try:
        vocab = json.load(open(a.config))["vocab_size"]
        rng = random.Random(1)
        sp = {"max_new_tokens": a.output_len, "temperature": 0, "ignore_eos": True}
        bodies = [{"input_ids": [rng.randrange(3, vocab) for _ in range(a.input_len)], "sampling_params": sp}
                  for _ in range(a.requests)]
        t0 = time.time()
        first, last = asyncio.run(run_and_measure(a.port, bodies, a.window))
        wall = time.time() - t0
    finally:
        server.terminate()
        server.wait(timeout=60)
    d = {k: last[k] - first[k] for k in ("decode_steps", "decode_seconds", "decode_host_seconds",
                                         "decode_kv_tokens")}
    steps, secs, host = d["decode_steps"], d["decode_seconds"], d["decode_host_seconds"]
    version = subprocess.run([a.bin, "--version"], capture_output=True, text=True).stdout.split()
    rec = {"label": a.label, "command": " ".join(cmd),
           "git_hash": a.commit or (version[-1] if version else "unknown"),
           "device": last.get("device", ""), "date": time.strftime("%Y-%m-%d"), "requests": a.requests,
           "input_len": a.input_len, "output_len": a.output_len, "window_decode_steps": steps,
           "mean_context": d["decode_kv_tokens"] / steps / a.requests if steps else None,
           "mean_step_ms": 1e3 * secs / steps if steps else None,
           "host_ms_per_step": 1e3 * host / steps if steps else None, "wall_s": wall}
    print(json.dumps(rec))
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()

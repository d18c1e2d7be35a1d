#!/usr/bin/env python3
"""Helpers of scripts/gpu/seed.sh, copybw also of e2e.sh's mbu step (standard library only, torch or numpy where asked for):

  copybw DEVICE                      device copy bandwidth in GB/s (bytes read + bytes written), "null" if
                                     it cannot be measured
  wait URL PID TIMEOUT_S             exit 0 once URL/health answers 200, 1 if PID exits first, 2 on timeout
  info URL                           URL/get_server_info as one JSON line ({} when it does not answer)
  poll URL FILE INTERVAL_S           append URL/get_server_info samples to FILE until killed
  row ...                            the JSON line of one run (see row() below)
  line JSON                          that line's one-line summary
"""
import json
import math
import os
import sys
import time
import urllib.request


def get_json(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def copybw(device):
    try:
        if device == "cuda":
            import torch

            x = torch.empty(2**31, dtype=torch.uint8, device="cuda")
            y = torch.empty_like(x)
            for _ in range(3):
                y.copy_(x)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(10):
                y.copy_(x)
            e.record()
            torch.cuda.synchronize()
            gbps = 2 * 10 * x.numel() / (s.elapsed_time(e) / 1e3) / 1e9
            del x, y
            torch.cuda.empty_cache()
        else:
            import numpy as np

            x = np.ones(2**28, dtype=np.uint8)
            y = np.empty_like(x)
            np.copyto(y, x)
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                np.copyto(y, x)
                best = min(best, time.perf_counter() - t)
            gbps = 2 * x.nbytes / best / 1e9
        print(f"{gbps:.1f}")
    except Exception as e:  # no torch, no GPU: MBU is then null, the runs still go on
        print(f"copybw: {type(e).__name__}: {e}", file=sys.stderr)
        print("null")


def wait(url, pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return 1
        # A zombie (exited, not yet reaped by the shell) still answers kill 0.
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return 1
        except OSError:
            pass
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return 0
        except Exception:
            pass
        time.sleep(0.5)
    return 2


def info(url):
    try:
        print(json.dumps(get_json(url + "/get_server_info")))
    except Exception as e:
        print(f"info: {e}", file=sys.stderr)
        print("{}")


POLL_KEYS = ["num_running_reqs", "num_waiting_reqs", "decode_steps", "decode_seconds", "decode_kv_tokens",
             "generation_tokens", "num_steps"]


def poll(url, path, interval):
    with open(path, "a") as f:
        t0 = time.monotonic()
        while True:
            try:
                j = get_json(url + "/get_server_info", timeout=2)
                s = {k: j.get(k) for k in POLL_KEYS}
                s["t"] = round(time.monotonic() - t0, 3)
                f.write(json.dumps(s) + "\n")
                f.flush()
            except Exception:
                pass
            time.sleep(interval)


def finite(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def mbu(weight_bytes, steps, kv_tokens, kv_bytes_per_token, seconds, copy_gbps):
    if not copy_gbps or not seconds or seconds <= 0 or steps <= 0:
        return None
    return finite((weight_bytes * steps + kv_tokens * kv_bytes_per_token) / seconds / (copy_gbps * 1e9))


def row(a):
    """a: model kv dataset status client_rc wall_s client_file before_file after_file poll_file copy
    device server_args git_hash error."""
    (model, kv, ds, status, client_rc, wall_s, client_file, before_file, after_file, poll_file, copy,
     device, server_args, git_hash, error) = a
    load = lambda p: json.load(open(p)) if p and os.path.exists(p) and os.path.getsize(p) > 0 else {}
    b, x = load(before_file), load(after_file)
    if not x and b:  # the server died during the run: what it said before (pool, dtype), no deltas
        x = dict(b)
    client = {}
    if client_file and os.path.exists(client_file):
        lines = [l for l in open(client_file).read().splitlines() if l.strip()]
        if lines:
            client = json.loads(lines[-1])
    copy_gbps = None if copy in ("", "null", "nan") else float(copy)
    d = lambda k: (x.get(k, 0) - b.get(k, 0)) if k in x else None
    steps, secs, kv_tok = d("decode_steps"), d("decode_seconds"), d("decode_kv_tokens")
    bpt = x.get("kv_bytes_per_token", 0)
    weight_bytes = x.get("weight_bytes")
    # What a decode step reads of the weights: the server says (all but an untied input embedding).
    wread = x.get("decode_weight_bytes")
    r = {"model": model, "kv_cache_dtype": x.get("kv_cache_dtype", kv), "kv_cache_dtype_arg": kv, "dataset": ds,
         "status": status, "error": error or None, "device": x.get("device", device),
         "num_prompts": client.get("num_prompts"), "completed": client.get("completed"),
         "client_rc": int(client_rc) if client_rc not in ("", None) else None, "wall_s": finite(float(wall_s)),
         "request_throughput": finite(client.get("request_throughput")),
         "input_throughput": finite(client.get("input_throughput")),
         "output_throughput": finite(client.get("output_throughput")),
         "median_ttft_ms": finite(client.get("median_ttft_ms")), "p99_ttft_ms": finite(client.get("p99_ttft_ms")),
         "median_itl_ms": finite(client.get("median_itl_ms")), "p99_itl_ms": finite(client.get("p99_itl_ms")),
         "median_tpot_ms": finite(client.get("median_tpot_ms")),
         "pool_tokens": x.get("max_total_num_tokens"), "kv_bytes_per_token": bpt or None,
         "max_running_requests": x.get("max_running_requests"), "context_length": x.get("context_length")}
    # Peak running requests of this run: the server's counter (a peak since its start) when this run
    # raised it, else the largest num_running_reqs sampled while the run went on.
    samples = []
    if poll_file and os.path.exists(poll_file):
        for l in open(poll_file):
            try:
                samples.append(json.loads(l))
            except ValueError:
                pass
    sampled = max((s.get("num_running_reqs") or 0 for s in samples), default=None)
    if x and x.get("peak_running", 0) > b.get("peak_running", 0):
        r["peak_running"], r["peak_running_source"] = x["peak_running"], "server"
    else:
        r["peak_running"], r["peak_running_source"] = sampled, "sampled"
    r["peak_running_sampled"] = sampled
    r["num_retractions"] = d("num_retractions")
    r["decode_steps"] = steps
    r["decode_seconds"] = finite(secs) if secs is not None else None
    # Steps that carry prompt tokens (decode rows may ride along): where a run's other time goes.
    for k in ("prefill_steps", "prefill_seconds", "prefill_host_seconds", "prefill_kv_tokens", "prefill_tokens",
              "prefill_decode_rows"):
        r[k] = d(k)
    r["mean_decode_step_ms"] = finite(1e3 * secs / steps) if steps else None
    r["mean_decode_kv_tokens"] = finite(kv_tok / steps) if steps else None
    r["decode_mbu"] = mbu(wread, steps or 0, kv_tok or 0, bpt, secs, copy_gbps) if wread else None
    # The host's own part of the decode steps (scheduling, batch building, bookkeeping; the rest
    # is the device's forward and sampling), where the server counts it.
    host = d("decode_host_seconds")
    r["decode_host_share"] = finite(host / secs) if host is not None and secs else None
    # The same over decode steps of >= 64 rows: the server's counters where it has them, else the
    # poll windows whose both ends had >= 64 requests running (an approximation).
    big = x.get("large_decode_batch")
    if big is not None:
        ls, lsec, lkv = d("large_decode_steps"), d("large_decode_seconds"), d("large_decode_kv_tokens")
        lhost = d("large_decode_host_seconds")
        r["large_decode_host_share"] = finite(lhost / lsec) if lhost is not None and lsec else None
        src = "server"
    else:
        big, ls, lsec, lkv, src = 64, 0, 0.0, 0, "poll"
        for p, q in zip(samples, samples[1:]):
            if None in (p.get("decode_steps"), q.get("decode_steps")):
                continue
            if min(p.get("num_running_reqs") or 0, q.get("num_running_reqs") or 0) >= big:
                ls += q["decode_steps"] - p["decode_steps"]
                lsec += q["decode_seconds"] - p["decode_seconds"]
                lkv += q["decode_kv_tokens"] - p["decode_kv_tokens"]
    r["large_decode_batch"] = big
    r["large_decode_steps"] = ls
    r["large_decode_mean_step_ms"] = finite(1e3 * lsec / ls) if ls else None
    r["large_decode_mbu"] = mbu(wread, ls or 0, lkv or 0, bpt, lsec, copy_gbps) if wread else None
    r["large_decode_source"] = src
    r["weight_bytes"], r["weight_bytes_read"] = weight_bytes, wread
    r["copy_gb_per_s"] = copy_gbps
    r["server_args"] = server_args
    r["git_hash"] = git_hash
    r["client"] = client or None
    print(json.dumps(r))


def line(text):
    """The summary line of one JSON row."""
    r = json.loads(text)
    f = lambda k, fmt="{:.2f}": "-" if r.get(k) is None else fmt.format(r[k])
    print(f"{r['model']} {r['kv_cache_dtype']} {r['dataset']}: {r['status']} in {f('wall_s', '{:.0f}')} s; "
          f"{f('request_throughput')} req/s, {f('output_throughput', '{:.0f}')} out tok/s, "
          f"TTFT {f('median_ttft_ms', '{:.1f}')} ms, ITL {f('median_itl_ms', '{:.2f}')} ms, "
          f"pool {r['pool_tokens']}, peak running {r['peak_running']} ({r['peak_running_source']}), "
          f"decode MBU {f('decode_mbu', '{:.3f}')} (>= {r['large_decode_batch']} rows: "
          f"{f('large_decode_mbu', '{:.3f}')} over {r['large_decode_steps']} steps, {r['large_decode_source']}), "
          f"host share of decode steps {f('decode_host_share', '{:.3f}')} (>= {r['large_decode_batch']} rows: "
          f"{f('large_decode_host_share', '{:.3f}')}); decode steps {f('decode_seconds', '{:.1f}')} s, "
          f"steps with prompt tokens {f('prefill_seconds', '{:.1f}')} s over {r.get('prefill_steps')} "
          f"({r.get('prefill_tokens')} prompt tokens, {r.get('prefill_decode_rows')} decode rows)")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "copybw":
        copybw(args[0])
    elif cmd == "wait":
        sys.exit(wait(args[0], int(args[1]), float(args[2])))
    elif cmd == "info":
        info(args[0])
    elif cmd == "poll":
        poll(args[0], args[1], float(args[2]))
    elif cmd == "row":
        row(args)
    elif cmd == "line":
        line(args[0])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()

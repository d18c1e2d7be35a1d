#!/usr/bin/env python3
"""Soak test: one `serve8 serve` under mixed traffic for a while, watching its memory and KV slots.

Starts the server itself (stories260K converted from llama2.c on the CPU, as tests/server does, or
any --model-path), then runs --workers client threads that each pick, request after request:
/generate and /v1/completions (token-id prompts: stories260K has no tokenizer), streamed or not,
single and batched; streams dropped mid-way (the server must abort them); and bad requests
(malformed JSON, wrong types, out-of-range parameters, text without a tokenizer, a wrong content
type, an oversized body, an unknown route), each of which must get a 4xx in OpenAI's error shape.
Every --sample-seconds it records the server's VmRSS, threads and open descriptors
(/proc/PID/...) and its KV slots (/get_server_info). At the end it waits for the server to go
idle, flushes the radix cache, checks every KV slot is free, stops the server with SIGTERM
(exit 0 expected) and writes a JSON summary. Exits 1 when something went wrong (an unexpected
answer, a leaked slot, a bad exit).

Stdlib only. Example (the recorded run in docs/reliability.md):
  nice python3 scripts/soak.py --serve8 build/src/cli/serve8 --minutes 10 --out bench/results/soak_cpu.json
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid):
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "Threads"):
                out[k] = int(v.split()[0])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


class Soak:
    def __init__(self, args, port):
        self.args = args
        self.port = port
        self.lock = threading.Lock()
        self.counts = {}  # kind -> {outcome: n}
        self.unexpected = []  # first few unexpected answers, for the report
        self.stop = threading.Event()
        self.max_request_bytes = args.max_request_bytes

    def count(self, kind, outcome, detail=None):
        with self.lock:
            c = self.counts.setdefault(kind, {})
            c[outcome] = c.get(outcome, 0) + 1
            if outcome not in ("ok", "rejected_4xx", "aborted") and len(self.unexpected) < 50:
                self.unexpected.append({"kind": kind, "outcome": outcome, "detail": str(detail)[:300]})

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, content_type="application/json"):
        c = self.conn()
        try:
            headers = {"Content-Type": content_type} if content_type else {}
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def get_json(self, path):
        status, data = self.request("GET", path)
        assert status == 200, (path, status, data[:200])
        return json.loads(data)

    # ---- traffic ----

    def prompt(self, rng):
        return [1] + [rng.randrange(3, 500) for _ in range(rng.randrange(2, 60))]

    def sp(self, rng):
        return {"max_new_tokens": rng.randrange(1, 96), "temperature": rng.choice([0, 0.7, 1.0]),
                "top_p": rng.choice([1.0, 0.9]), "top_k": rng.choice([-1, 40]), "ignore_eos": rng.random() < 0.5}

    def good(self, kind, status, data, stream):
        if status != 200:
            self.count(kind, f"http_{status}", data[:300])
            return
        if stream:
            text = data.decode(errors="replace")
            if not text.rstrip().endswith("data: [DONE]"):
                self.count(kind, "bad_stream", text[-300:])
                return
        else:
            json.loads(data)
        self.count(kind, "ok")

    def generate(self, rng):
        stream = rng.random() < 0.5
        body = {"input_ids": self.prompt(rng), "sampling_params": self.sp(rng), "stream": stream}
        kind = "generate_stream" if stream else "generate"
        status, data = self.request("POST", "/generate", json.dumps(body))
        self.good(kind, status, data, stream)

    def generate_batch(self, rng):
        n = rng.randrange(2, 5)
        body = {"input_ids": [self.prompt(rng) for _ in range(n)], "sampling_params": self.sp(rng)}
        status, data = self.request("POST", "/generate", json.dumps(body))
        if status == 200 and len(json.loads(data)) != n:
            self.count("generate_batch", "wrong_batch_size", data[:300])
            return
        self.good("generate_batch", status, data, False)

    def completions(self, rng):
        stream = rng.random() < 0.5
        sp = self.sp(rng)
        body = {"model": self.served_name, "prompt": self.prompt(rng), "max_tokens": sp["max_new_tokens"],
                "temperature": sp["temperature"], "top_p": sp["top_p"], "stream": stream}
        if stream and rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
        kind = "completions_stream" if stream else "completions"
        status, data = self.request("POST", "/v1/completions", json.dumps(body))
        self.good(kind, status, data, stream)

    def disconnect(self, rng):
        """A stream dropped after its first event (or before any, at random)."""
        if rng.random() < 0.5:
            path, body = "/generate", {"input_ids": self.prompt(rng), "stream": True,
                                       "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
        else:
            path, body = "/v1/completions", {"prompt": self.prompt(rng), "stream": True, "max_tokens": 400}
        data = json.dumps(body).encode()
        s = socket.create_connection(("127.0.0.1", self.port), timeout=self.args.stream_timeout)
        try:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
            if rng.random() < 0.8:
                got = b""
                t0 = time.time()
                try:
                    while b"data: " not in got:
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        got += chunk
                except TimeoutError:
                    self.count("disconnect", "no_first_event",
                               f"{path} {data[:120]!r}: {time.time() - t0:.0f} s, got {got[:200]!r}")
                    return
                if not got.startswith(b"HTTP/1.1 200"):
                    self.count("disconnect", "bad_start", got[:300])
                    return
        finally:
            s.close()
        self.count("disconnect", "ok")

    BAD = [
        ("POST", "/generate", b"{bad json"),
        ("POST", "/generate", b'{"input_ids": [1, 2'),
        ("POST", "/generate", b"[1, 2]"),
        ("POST", "/generate", b'{"input_ids": "1 2"}'),
        ("POST", "/generate", b'{"input_ids": [1, -4]}'),
        ("POST", "/generate", b'{"input_ids": [1, 2], "sampling_params": {"temperature": -1}}'),
        ("POST", "/generate", b'{"input_ids": [1, 2], "sampling_params": {"top_p": 7}}'),
        ("POST", "/generate", b'{"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 1000000000}}'),
        ("POST", "/generate", b'{"input_ids": [[1, 2], [1, "x"]]}'),
        ("POST", "/generate", b'{"text": "needs a tokenizer"}'),
        ("POST", "/generate", b'{"text": "\xff\xfe"}'),
        ("POST", "/v1/completions", b'{"prompt": [1, 2], "max_tokens": -1}'),
        ("POST", "/v1/completions", b'{"prompt": [1, 2], "n": 500}'),
        ("POST", "/v1/completions", b'{"model": "other", "prompt": [1, 2]}'),
        ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}]}'),
        ("POST", "/v1/chat/completions", b'{"messages": []}'),
        ("POST", "/abort_request", b'{"rid": 5}'),
        ("GET", "/v1/nothing", None),
    ]

    def bad(self, rng):
        r = rng.random()
        if r < 0.08:
            kind, status, data = "bad_content_type", *self.request("POST", "/generate", b"input_ids=1", "text/plain")
        elif r < 0.16:
            body = b'{"input_ids": [1], "pad": "' + b"x" * self.max_request_bytes + b'"}'
            try:
                kind, status, data = "bad_oversized", *self.request("POST", "/generate", body)
            except (ConnectionError, http.client.HTTPException) as e:
                # The server may answer 413 and close before the whole body is sent.
                self.count("bad_oversized", "rejected_4xx", e)
                return
        else:
            method, path, body = rng.choice(self.BAD)
            kind, (status, data) = "bad_request", self.request(method, path, body)
        try:
            ok = 400 <= status < 500 and json.loads(data)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            ok = False
        self.count(kind, "rejected_4xx" if ok else f"http_{status}", data[:300])

    def worker(self, seed):
        rng = random.Random(seed)
        actions = [(self.generate, 0.32), (self.completions, 0.25), (self.generate_batch, 0.08),
                   (self.disconnect, 0.15), (self.bad, 0.20)]
        while not self.stop.is_set():
            r, acc = rng.random(), 0.0
            for fn, p in actions:
                acc += p
                if r < acc:
                    break
            try:
                fn(rng)
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                self.count(fn.__name__, f"exception_{type(e).__name__}", e)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve8", default=os.environ.get("SERVE8_BIN"), help="serve8 binary (default: $SERVE8_BIN)")
    ap.add_argument("--model-path", help="model to serve (default: stories260K converted from ../shared)")
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--seconds", type=float, default=None, help="duration in seconds (overrides --minutes)")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--sample-seconds", type=float, default=5.0)
    ap.add_argument("--max-request-bytes", type=int, default=65536)
    ap.add_argument("--max-total-tokens", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stream-timeout", type=float, default=60, help="seconds a dropped stream waits for its first event")
    ap.add_argument("--log", help="server log file (default: beside --out)")
    ap.add_argument("--out", required=True, help="JSON summary to write")
    args = ap.parse_args()
    if not args.serve8:
        ap.error("give --serve8 or set SERVE8_BIN")
    duration = args.seconds if args.seconds is not None else 60 * (args.minutes if args.minutes is not None else 1)

    tmp = tempfile.TemporaryDirectory(prefix="soak-")
    model = args.model_path
    if model is None:
        shared = Path(os.environ.get("SERVE8_SHARED_DIR", REPO_ROOT.parent / "shared"))
        model = os.path.join(tmp.name, "stories260K")
        subprocess.run([args.serve8, "convert", "llama2c", "--checkpoint",
                        str(shared / "models" / "stories260K" / "stories260K.bin"), "--output", model],
                       check=True, capture_output=True)
    port = free_port()
    cmd = [args.serve8, "serve", "--model-path", model, "--port", str(port), "--device", "cpu",
           "--max-total-tokens", str(args.max_total_tokens), "--max-request-bytes", str(args.max_request_bytes),
           "--served-model-name", "soak"]
    log_path = args.log or str(Path(args.out).with_suffix(".server.log"))
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    soak = Soak(args, port)
    problems = []
    summary = {"command": " ".join(sys.argv), "server_command": " ".join(cmd), "duration_s": duration,
               "workers": args.workers, "seed": args.seed}
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"serve8 exited with {proc.returncode}; see {log_path}")
            try:
                soak.served_name = soak.get_json("/v1/models")["data"][0]["id"]
                break
            except (OSError, http.client.HTTPException, AssertionError):
                if time.time() > deadline:
                    raise SystemExit(f"serve8 did not come up; see {log_path}")
                time.sleep(0.2)
        info0 = soak.get_json("/get_server_info")
        samples = []

        def sample(t0):
            info = soak.get_json("/get_server_info")
            s = {"t": round(time.time() - t0, 1), **proc_status(proc.pid), "kv_free": info["kv_slots"]["free"],
                 "kv_cached": info["kv_slots"]["cached"], "kv_used": info["kv_slots"]["used"],
                 "running": info["num_running_reqs"], "waiting": info["num_waiting_reqs"],
                 "finished": info["num_finished"]}
            samples.append(s)
            return s

        t0 = time.time()
        sample(t0)
        threads = [threading.Thread(target=soak.worker, args=(args.seed * 1000 + i,), daemon=True)
                   for i in range(args.workers)]
        for t in threads:
            t.start()
        while time.time() - t0 < duration:
            time.sleep(min(args.sample_seconds, max(0.0, duration - (time.time() - t0))))
            s = sample(t0)
            print(json.dumps(s), flush=True)
            if proc.poll() is not None:
                problems.append(f"serve8 exited with {proc.returncode} during the soak")
                break
        soak.stop.set()
        for t in threads:
            t.join(timeout=180)
            if t.is_alive():
                problems.append("a client thread did not finish within 180 s")

        # Idle: every slot is free or cached; after a flush, every slot is free.
        deadline = time.time() + 30
        while True:
            info = soak.get_json("/get_server_info")
            k = info["kv_slots"]
            if info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0 and k["free"] + k["cached"] == k["total"]:
                break
            if time.time() > deadline:
                problems.append(f"not idle 30 s after the traffic stopped: {json.dumps(k)}")
                break
            time.sleep(0.1)
        status, data = soak.request("POST", "/flush_cache")
        if status != 200:
            problems.append(f"/flush_cache answered {status}: {data[:200]}")
        time.sleep(0.2)
        end_info = soak.get_json("/get_server_info")
        end = sample(t0)
        metrics = soak.request("GET", "/metrics")[1].decode()
        finished = {}
        for line in metrics.splitlines():
            if line.startswith("serve8_requests_finished_total{"):
                finished[line.split('"')[1]] = float(line.split()[-1])
    finally:
        soak.stop.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                problems.append("serve8 did not exit within 60 s of SIGTERM")
        log.close()
    if proc.returncode != 0:
        problems.append(f"serve8 exited with {proc.returncode}")

    k = end_info["kv_slots"]
    leaked = k["total"] - k["free"]
    if leaked:
        problems.append(f"{leaked} KV slots not free at the end")
    sent = sum(sum(c.values()) for c in soak.counts.values())
    unexpected = sum(n for c in soak.counts.values() for o, n in c.items() if o not in ("ok", "rejected_4xx"))
    if unexpected:
        problems.append(f"{unexpected} unexpected answers")
    # RSS: the first sample is before any traffic; drift is measured from the first sample after
    # a warm-up (a tenth of the run, at least one sample), when allocator pools have grown.
    rss = [s["VmRSS"] for s in samples if "VmRSS" in s]
    warm_i = max(1, len(samples) // 10)
    warm = samples[min(warm_i, len(samples) - 1)]
    after = [s for s in samples[warm_i:] if "VmRSS" in s]
    slope = None
    if len(after) >= 3:
        ts = [s["t"] for s in after]
        ys = [s["VmRSS"] for s in after]
        mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
        den = sum((t - mt) ** 2 for t in ts)
        slope = 60 * sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / den if den else 0.0
    summary.update({
        "requests_sent": sent,
        "requests_by_kind": soak.counts,
        "unexpected": unexpected,
        "unexpected_examples": soak.unexpected,
        "server_finished_by_reason": finished,
        "server_num_finished": end_info["num_finished"],
        "num_retractions": end_info["num_retractions"],
        "kv_slots_total": k["total"],
        "kv_slots_free_at_end": k["free"],
        "kv_slots_leaked": leaked,
        "rss_kib": {"before_traffic": rss[0] if rss else None, "after_warmup": warm.get("VmRSS"),
                    "end": end.get("VmRSS"), "max": max(rss) if rss else None,
                    "drift_after_warmup": end.get("VmRSS", 0) - warm.get("VmRSS", 0),
                    "drift_pct_after_warmup": round(100.0 * (end.get("VmRSS", 0) - warm.get("VmRSS", 0))
                                                    / warm["VmRSS"], 2) if warm.get("VmRSS") else None,
                    "slope_after_warmup_kib_per_min": round(slope, 1) if slope is not None else None},
        "threads": {"before_traffic": samples[0].get("Threads"), "end": end.get("Threads")},
        "fds": {"before_traffic": samples[0].get("fds"), "end": end.get("fds")},
        "server_exit_code": proc.returncode,
        "initial_kv_slots": info0["kv_slots"],
        "samples": samples,
        "problems": problems,
        "ok": not problems,
    })
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in ("requests_sent", "unexpected", "kv_slots_leaked", "rss_kib",
                                               "server_exit_code", "problems")}, indent=1))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())

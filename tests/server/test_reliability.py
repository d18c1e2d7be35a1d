"""Reliability under faults: many clients that drop their streams, slow clients, corrupted model
files, the listening address, and a short soak (scripts/soak.py).

SERVE8_RELIABILITY_SCALE (default 1) multiplies the sizes: the disconnect test drops 50 * scale
streams (scale 20: the 1000 of the run recorded in docs/reliability.md).
"""

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import REPO_ROOT, free_port, serve8_bin

SCALE = int(os.environ.get("SERVE8_RELIABILITY_SCALE", "1"))


def metric(server, name, label=None):
    prefix = name + (f'{{reason="{label}"}}' if label else "")
    for line in server.get("/metrics").text.splitlines():
        if line.startswith(prefix + " "):
            return float(line.split()[-1])
    pytest.fail(f"no {prefix} in /metrics")


def open_stream(port, path, body, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(60)
    s.connect(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def read_until_event(s):
    got = b""
    while got.count(b"data: ") < 1:
        chunk = s.recv(65536)
        assert chunk, f"the server closed the stream: {got[:300]}"
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got[:300]


# ---- many streams dropped mid-way ----

def test_dropped_streams_are_aborted_and_freed(start_server):
    """50 * SCALE streams over the three streaming routes, each dropped after its first event, in
    waves of up to 50 open at once: each must be aborted (the abort counter rises by exactly that
    many) and every KV slot must be free again within a few seconds of the last drop. The built-in
    tiny Llama (vocab 32000, context 2048) is slow enough per step that no request can finish
    its 2000 tokens before its client goes."""
    n = 50 * SCALE
    # Admission keeps room for what running requests will decode (0.7 x 2000 tokens each at first):
    # a pool of 131,072 slots admits a whole wave at once, so every stream's first event comes.
    server = start_server(["--max-total-tokens", "131072", "--max-running-requests", "64",
                           "--served-model-name", "tiny"])
    before = metric(server, "serve8_requests_finished_total", "abort")
    bodies = [
        ("/generate", {"input_ids": [1, 5, 6, 7], "stream": True,
                       "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}),
        ("/v1/completions", {"prompt": [1, 9, 10], "stream": True, "max_tokens": 2000, "ignore_eos": True}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell a story"}], "stream": True,
                                  "max_tokens": 2000, "ignore_eos": True, "temperature": 0.8}),
    ]
    t0 = time.time()
    dropped = 0
    while dropped < n:
        wave = min(50, n - dropped)
        socks = [open_stream(server.port, *bodies[(dropped + i) % len(bodies)]) for i in range(wave)]
        for s in socks:
            read_until_event(s)
            s.close()
        dropped += wave
    last_drop = time.time()
    deadline = last_drop + 10 + n / 100
    while metric(server, "serve8_requests_finished_total", "abort") < before + n:
        assert time.time() < deadline, (f"{metric(server, 'serve8_requests_finished_total', 'abort') - before} "
                                        f"of {n} dropped streams aborted")
        time.sleep(0.05)
    assert metric(server, "serve8_requests_finished_total", "abort") == before + n
    server.assert_all_slots_free(timeout=10)
    print(f"{n} streams dropped in {last_drop - t0:.1f} s; all aborted and slots free "
          f"{time.time() - last_drop:.2f} s after the last drop")
    # And the server still serves.
    assert server.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 4})["meta_info"][
        "completion_tokens"] == 4
    server.stop()


# ---- slow clients ----

def test_slow_clients_time_out_without_holding_the_scheduler(start_server, stories_dir):
    """--http-timeout 2: a client that stalls while sending its body is dropped after ~2 s; a client
    that never reads its stream neither stops other requests nor keeps its KV slots; requests from
    other clients complete while both stall."""
    server = start_server(["--model-path", str(stories_dir), "--max-total-tokens", "8192", "--http-timeout", "2"])
    ctx = server.get("/get_model_info").json()["context_length"]

    # A body that never arrives: headers promise 1000 bytes, 10 come.
    slow = socket.create_connection(("127.0.0.1", server.port))
    slow.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n{\"input_id")
    slow.settimeout(30)
    t_slow = time.time()
    # A batch of streams whose client never reads: the server's writes fill the socket buffers.
    unread = open_stream(server.port, "/generate",
                         {"input_ids": [[1, 2, 3 + i] for i in range(16)], "stream": True,
                          "sampling_params": {"max_new_tokens": ctx - 8, "ignore_eos": True}}, rcvbuf=4096)

    # Meanwhile other clients are served promptly.
    for i in range(5):
        t = time.time()
        out = server.generate(input_ids=[1, 7, 8 + i], sampling_params={"max_new_tokens": 16, "ignore_eos": True})
        assert out["meta_info"]["completion_tokens"] == 16
        assert time.time() - t < 10

    # The stalled body: the server gives up after the timeout (closing, or answering 4xx then closing).
    reply = b""
    while True:
        chunk = slow.recv(65536)
        if not chunk:
            break
        reply += chunk
    waited = time.time() - t_slow
    assert waited < 20, f"the stalled upload held its connection for {waited:.1f} s"
    assert not reply or reply.startswith(b"HTTP/1.1 4"), reply[:200]
    slow.close()

    # The unread stream: its requests finish or are aborted and give their slots back, with the
    # client still connected and not reading.
    deadline = time.time() + 60
    while True:
        info = server.server_info()
        if info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0:
            break
        assert time.time() < deadline, f"the unread stream still runs: {json.dumps(info['kv_slots'])}"
        time.sleep(0.1)
    server.assert_all_slots_free()
    unread.close()
    assert server.generate(input_ids=[1, 2], sampling_params={"max_new_tokens": 2})["meta_info"][
        "completion_tokens"] == 2
    server.stop()


# ---- the listening address ----

def listening_addresses(port):
    """(address, port) of the TCP sockets listening on `port`, from /proc/net/tcp{,6}."""
    found = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local, state = f[1], f[3]
            if state != "0A":  # LISTEN
                continue
            addr_hex, port_hex = local.split(":")
            if int(port_hex, 16) != port:
                continue
            if len(addr_hex) == 8:
                addr = socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(addr_hex, 16)))
            else:
                addr = socket.inet_ntop(socket.AF_INET6, b"".join(
                    struct.pack("<I", int(addr_hex[i:i + 8], 16)) for i in range(0, 32, 8)))
            found.append(addr)
    return found


def test_default_bind_address_is_loopback(stories_dir):
    help_text = subprocess.run([serve8_bin(), "serve", "--help"], capture_output=True, text=True).stdout
    host_line = next(line for line in help_text.splitlines() if "--host" in line)
    assert "127.0.0.1" in host_line, host_line
    port = free_port()
    proc = subprocess.Popen([serve8_bin(), "serve", "--model-path", str(stories_dir), "--port", str(port),
                             "--max-total-tokens", "1024"], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, f"serve8 exited with {proc.returncode}"
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.time() < deadline
            time.sleep(0.1)
        assert listening_addresses(port) == ["127.0.0.1"]
        assert requests.get(f"http://127.0.0.1:{port}/get_server_info", timeout=10).json()["host"] == "127.0.0.1"
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


# ---- corrupted model files ----

def read_safetensors(path):
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path, header, data):
    h = json.dumps(header).encode()
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + data)


def break_truncate(d):
    p = d / "model.safetensors"
    os.truncate(p, p.stat().st_size - 100)
    return ["model.safetensors", "truncated"]


def break_header_json(d):
    p = d / "model.safetensors"
    raw = bytearray(p.read_bytes())
    raw[8:16] = b"{oops!!!"  # the header's first bytes: no longer JSON
    p.write_bytes(bytes(raw))
    return ["model.safetensors", "JSON"]


def break_header_length(d):
    p = d / "model.safetensors"
    raw = bytearray(p.read_bytes())
    raw[0:8] = struct.pack("<Q", len(raw) * 4)
    p.write_bytes(bytes(raw))
    return ["model.safetensors", "header"]


def wrong_shape(d):
    header, data = read_safetensors(d / "model.safetensors")
    name = next(k for k, v in header.items() if k != "__metadata__" and len(v["shape"]) == 2
                and v["shape"][0] != v["shape"][1] and ".mlp." in k)
    header[name]["shape"] = header[name]["shape"][::-1]  # same bytes, transposed shape
    write_safetensors(d / "model.safetensors", header, data)
    return ["model.safetensors", name, "shape"]


def missing_tensor(d):
    header, data = read_safetensors(d / "model.safetensors")
    name = next(k for k in header if "layers.1.self_attn.k_proj" in k)
    del header[name]
    write_safetensors(d / "model.safetensors", header, data)
    return ["model.safetensors", name, "missing"]


def offsets_past_end(d):
    header, data = read_safetensors(d / "model.safetensors")
    name = next(k for k in header if k != "__metadata__")
    b, e = header[name]["data_offsets"]
    header[name]["data_offsets"] = [b + len(data), e + len(data)]
    write_safetensors(d / "model.safetensors", header, data)
    return ["model.safetensors", name]


def config_not_json(d):
    (d / "config.json").write_text('{"hidden_size": 64,')
    return ["config.json"]


def config_wrong_size(d):
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = cfg["intermediate_size"] + 8
    (d / "config.json").write_text(json.dumps(cfg))
    return ["model.safetensors", "shape"]


def no_weights(d):
    (d / "model.safetensors").unlink()
    return ["model.safetensors"]


STORIES_FAULTS = [break_truncate, break_header_json, break_header_length, wrong_shape, missing_tensor,
                  offsets_past_end, config_not_json, config_wrong_size, no_weights]


def run_cli(args, timeout=60):
    return subprocess.run([serve8_bin()] + args, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def assert_fails_naming(r, parts, what):
    msg = r.stdout + r.stderr
    assert r.returncode != 0, f"{what}: exit 0\n{msg[-2000:]}"
    for p in parts:
        assert p in msg, f"{what}: '{p}' not in the message:\n{msg[-2000:]}"
    assert "Segmentation" not in msg and r.returncode > 0, f"{what}: crashed ({r.returncode})\n{msg[-2000:]}"


@pytest.mark.parametrize("fault", STORIES_FAULTS, ids=lambda f: f.__name__)
def test_corrupted_model_fails_at_load(stories_dir, tmp_path, fault):
    broken = tmp_path / "broken"
    shutil.copytree(stories_dir, broken)
    parts = fault(broken)
    port = free_port()
    r = run_cli(["serve", "--model-path", str(broken), "--port", str(port), "--max-total-tokens", "1024"])
    assert_fails_naming(r, parts, f"serve {fault.__name__}")
    r = run_cli(["generate", "--model-path", str(broken), "--prompt-ids", "1 2 3", "--max-new-tokens", "2"])
    assert_fails_naming(r, parts, f"generate {fault.__name__}")


def test_truncated_gguf_fails_at_load(tmp_path):
    src = REPO_ROOT / "tests" / "golden" / "tiny.gguf"
    for keep, name in ((src.stat().st_size - 64, "tail"), (200, "metadata"), (6, "magic")):
        broken = tmp_path / f"trunc_{name}.gguf"
        broken.write_bytes(src.read_bytes()[:keep])
        r = run_cli(["generate", "--model-path", str(broken), "--prompt-ids", "1 2 3", "--max-new-tokens", "2"])
        assert_fails_naming(r, [broken.name], f"gguf truncated at {keep}")
    bad_magic = tmp_path / "bad_magic.gguf"
    bad_magic.write_bytes(b"NOPE" + src.read_bytes()[4:])
    r = run_cli(["serve", "--model-path", str(bad_magic), "--port", str(free_port())])
    assert_fails_naming(r, [bad_magic.name], "gguf bad magic")


def test_truncated_llama2c_checkpoint_fails_to_convert(tmp_path):
    from conftest import SHARED_DIR
    src = SHARED_DIR / "models" / "stories260K" / "stories260K.bin"
    broken = tmp_path / "stories_trunc.bin"
    broken.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    r = run_cli(["convert", "llama2c", "--checkpoint", str(broken), "--output", str(tmp_path / "out")])
    assert_fails_naming(r, ["stories_trunc.bin"], "llama2c truncated")


# ---- soak ----

def test_short_soak(tmp_path):
    """scripts/soak.py for 20 s: mixed traffic, no unexpected answer, no leaked slot, exit 0."""
    out = tmp_path / "soak.json"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "soak.py"), "--serve8", serve8_bin(),
                        "--seconds", str(20 * SCALE), "--workers", "6", "--sample-seconds", "2",
                        "--out", str(out)], capture_output=True, text=True, timeout=300 + 60 * SCALE)
    assert out.exists(), r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads(out.read_text())
    print(json.dumps({k: summary[k] for k in ("requests_sent", "requests_by_kind", "rss_kib", "problems")}))
    assert r.returncode == 0 and summary["ok"], json.dumps(summary["problems"]) + json.dumps(
        summary["unexpected_examples"][:5])
    assert summary["requests_sent"] > 50
    assert summary["kv_slots_leaked"] == 0 and summary["server_exit_code"] == 0

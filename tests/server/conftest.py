"""Fixtures for the end-to-end server tests: `serve8 serve` processes on free loopback ports.

SERVE8_BIN names the serve8 binary (ctest sets it); SERVE8_SHARED_DIR the shared data folder
(default: ../shared beside the checkout). Two models are used: stories260K converted from
llama2.c (no tokenizer: token ids only) and the built-in tiny dummy-weight Llama with the
Llama-2 tokenizer (text), named explicitly (serve's own default is SmolLM2-135M-Instruct where
scripts/setup.sh fetched it; test_smollm2.py serves that).

The same tests run against a server on the GPU (`scripts/gpu.sh e2e http`): SERVE8_TEST_SERVER_ARGS is
added to every server's arguments where the test does not set those flags itself (e.g. "--device
cuda --max-total-tokens 65536": servers sized by --mem-fraction-static would each claim most of a
GPU that several share), and SERVE8_TEST_TEXT_MODEL replaces
the built-in model where a test uses it (e.g. "--model-path llama-2-7b.json --load-format dummy
--tokenizer-path .../llama2-tokenizer").
"""

import json
import os
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DIR = Path(os.environ.get("SERVE8_SHARED_DIR", REPO_ROOT.parent / "shared")).resolve()


def serve8_bin():
    b = os.environ.get("SERVE8_BIN")
    if not b:
        pytest.fail("set SERVE8_BIN to the serve8 binary (ctest does)")
    return b


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `serve8 serve` process; its log goes to a file shown when something fails."""

    def __init__(self, args, log_path, api_key=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.log_path = log_path
        self.log = open(log_path, "w")
        cmd = [serve8_bin(), "serve", "--host", "127.0.0.1", "--port", str(self.port)] + list(args)
        # cwd = the checkout, so the built-in model finds ../shared/models/llama2-tokenizer.
        # One OpenMP thread per server: CI machines are small and shared, and spinning OpenMP
        # teams competing with the test's own threads slow everything down many times over.
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self._wait_healthy()

    def batch_invariant(self):
        """Whether a request's greedy output is independent of what it is batched with and of
        prefix-cache hits. The CPU backend is (one GEMV per row); the CUDA backend is not: cuBLASLt
        picks kernels by batch size and decode runs in padded CUDA-graph buckets, as in SGLang and
        vLLM by default. Tests assert exact agreement only where it is promised."""
        return self.server_info()["device"] == "cpu"

    def headers(self):
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log_tail(self, n=40):
        self.log.flush()
        return "".join(Path(self.log_path).read_text(errors="replace").splitlines(True)[-n:])

    def _wait_healthy(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"serve8 exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    models = requests.get(self.url + "/v1/models", headers=self.headers(), timeout=10).json()
                    self.served_name = models["data"][0]["id"]
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.proc.kill()
        pytest.fail(f"serve8 did not become healthy in {timeout}s:\n{self.log_tail()}")

    def get(self, path, **kw):
        kw.setdefault("timeout", 60)
        return requests.get(self.url + path, headers=self.headers(), **kw)

    def post(self, path, body=None, **kw):
        kw.setdefault("timeout", 120)
        return requests.post(self.url + path, json=body, headers=self.headers(), **kw)

    def generate(self, **body):
        r = self.post("/generate", body)
        assert r.status_code == 200, r.text
        return r.json()

    def server_info(self):
        r = self.get("/get_server_info")
        assert r.status_code == 200, r.text
        return r.json()

    def assert_all_slots_free(self, timeout=10):
        """Every KV slot is free or held only by the radix cache, then free after a flush."""
        deadline = time.time() + timeout
        while True:
            info = self.server_info()
            s = info["kv_slots"]
            idle = info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0
            if idle and s["free"] + s["cached"] == s["total"]:
                break
            if time.time() > deadline:
                pytest.fail(f"KV slots not returned: {json.dumps(info)}")
            time.sleep(0.05)
        r = self.post("/flush_cache")
        assert r.status_code == 200, r.text
        deadline = time.time() + timeout
        while True:
            s = self.server_info()["kv_slots"]
            if s["free"] == s["total"] and s["cached"] == 0:
                return
            if time.time() > deadline:
                pytest.fail(f"KV slots not free after /flush_cache: {s}")
            time.sleep(0.05)

    def stop(self):
        """SIGTERM: the server drains and must exit 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"serve8 did not exit after SIGTERM:\n{self.log_tail()}")
        self.log.close()
        assert self.proc.returncode == 0, f"serve8 exited with {self.proc.returncode}:\n{self.log_tail()}"


@pytest.fixture(scope="session")
def stories_dir(tmp_path_factory):
    """stories260K converted to an HF directory (no tokenizer)."""
    out = tmp_path_factory.mktemp("stories260K")
    ckpt = SHARED_DIR / "models" / "stories260K" / "stories260K.bin"
    if not ckpt.exists():
        pytest.fail(f"missing {ckpt}")
    subprocess.run([serve8_bin(), "convert", "llama2c", "--checkpoint", str(ckpt), "--output", str(out)],
                   check=True, capture_output=True)
    return out


def with_defaults(args, extra):
    """args followed by those flags of extra (each "--flag [value]") that args does not set."""
    out, i = list(args), 0
    while i < len(extra):
        j = i + 1
        while j < len(extra) and not extra[j].startswith("--"):
            j += 1
        if extra[i] not in args:
            out += extra[i:j]
        i = j
    return out


@pytest.fixture(scope="session")
def start_server(tmp_path_factory):
    """start_server(args, api_key=None) -> Server; every server is stopped (SIGTERM, exit 0) at the end."""
    servers = []
    logs = tmp_path_factory.mktemp("logs")

    def start(args, api_key=None):
        if "--model-path" not in args:
            text_model = os.environ.get("SERVE8_TEST_TEXT_MODEL") or "--model-path builtin:tiny-llama"
            args = shlex.split(text_model) + list(args)
        args = with_defaults(list(args), shlex.split(os.environ.get("SERVE8_TEST_SERVER_ARGS", "")))
        s = Server(args + (["--api-key", api_key] if api_key else []),
                   logs / f"server{len(servers)}.log", api_key=api_key)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def ids_server(start_server, stories_dir):
    """stories260K: input_ids only."""
    return start_server(["--model-path", str(stories_dir), "--max-total-tokens", "8192"])


@pytest.fixture(scope="session")
def text_server(start_server):
    """The built-in tiny Llama with the Llama-2 tokenizer: text in, text out (noise)."""
    return start_server(["--max-total-tokens", "16384", "--served-model-name", "tiny"])


def read_sse(response):
    """The JSON payloads of a server-sent-event stream, checking it ends with [DONE]."""
    events = []
    done = False
    for line in response.iter_lines():
        if not line:
            continue
        line = line.decode()
        assert line.startswith("data: "), line
        data = line[len("data: "):]
        assert not done, "data after [DONE]"
        if data == "[DONE]":
            done = True
            continue
        events.append(json.loads(data))
    assert done, "stream did not end with [DONE]"
    return events


def post_raw(server, body):
    """Sends a POST /generate on a raw socket, so a test controls when the client hangs up."""
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def fits_schema(value, schema):
    """Whether `value` fits `schema`, for the keywords the tests' schemas use (type, enum, bounds,
    lengths, items, properties, required, additionalProperties); no jsonschema needed."""
    kinds = {"object": dict, "string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list}
    t = schema.get("type")
    if t and (not isinstance(value, kinds[t]) or (t in ("integer", "number") and isinstance(value, bool))):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            return False
    if isinstance(value, str) and not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
        return False
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            return False
        return all(fits_schema(v, schema.get("items", {})) for v in value)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        if any(k not in value for k in schema.get("required", [])):
            return False
        if schema.get("additionalProperties") is False and any(k not in props for k in value):
            return False
        return all(fits_schema(v, props[k]) for k, v in value.items() if k in props)
    return True

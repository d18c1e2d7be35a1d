"""Data parallelism: two CPU replicas of `serve8 serve` (SmolLM2-135M-Instruct, GGUF) behind
sglang-router (PyPI `sglang-router`, its Rust router) with the cache-aware policy. Requests that
share a long prefix must land on one replica, where the radix cache serves the prefix; each replica
answers what the router polls (/health, /server_info, /model_info, /get_load) and exports SGLang's
metric names in /metrics.

The router needs no tokenizer in this mode: cache-aware routing matches raw request text, and the
tokenizer it tries to load from the workers' model path (a GGUF it cannot read) only logs a
warning. Skipped when sglang_router is not installed or the GGUF is absent."""

import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from conftest import REPO_ROOT, free_port

GGUF = Path(os.environ.get("SERVE8_MODELS_DIR") or REPO_ROOT / ".models") / "SmolLM2-135M-Instruct.Q4_1.gguf"

pytest.importorskip("sglang_router", reason="sglang-router is not installed (pip install sglang-router)")
pytestmark = pytest.mark.skipif(not GGUF.is_file(), reason=f"{GGUF} is missing: scripts/setup.sh fetches it")

MODEL = "smollm2"
TOPICS = ["the history of the Roman aqueducts", "how honeybees build and defend their hives",
          "the physics of sailing against the wind", "the chemistry of baking sourdough bread"]
SUFFIXES_PER_PREFIX = 16


def prefix(topic):
    """A long preamble (about 200 SmolLM2 tokens), distinct per topic from its first words."""
    return (f"Topic: {topic}. You are a patient teacher who explains {topic} to curious students. "
            f"Answer in one short sentence, with plain words, and never repeat the question. "
            f"Background notes on {topic}: " + " ".join(f"note {i} on {topic};" for i in range(12)) + " Question: ")


class RouterProcess:
    """`python3 -m sglang_router.launch_router` on free loopback ports; its log goes to a file."""

    def __init__(self, worker_urls, log_path):
        self.port, metrics_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "w")
        cmd = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *worker_urls,
               "--policy", "cache_aware", "--host", "127.0.0.1", "--port", str(self.port),
               "--prometheus-port", str(metrics_port), "--shutdown-grace-period-secs", "1",
               # No load balancing over the cache: a loaded CI machine's uneven loads must not
               # move a prefix (that policy is the router's, not what serve8 answers).
               "--balance-abs-threshold", "1000", "--balance-rel-threshold", "1000"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready(len(worker_urls))

    def _wait_ready(self, num_workers, timeout=60):
        """Until the router lists every worker with a load read from its /get_load (-1: unread)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the router exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                workers = requests.get(self.url + "/get_loads", timeout=2).json()["workers"]
                if len(workers) == num_workers and all(w["load"] >= 0 for w in workers):
                    return
            except (requests.RequestException, ValueError, KeyError):
                pass
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"the router did not list {num_workers} workers in {timeout}s:\n{self.log_tail()}")

    def log_tail(self, n=30):
        self.log.flush()
        return "".join(open(self.log_path, errors="replace").readlines()[-n:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def replicas(start_server):
    args = ["--model-path", str(GGUF), "--max-total-tokens", "4096", "--served-model-name", MODEL]
    return [start_server(args), start_server(args)]


@pytest.fixture(scope="module")
def router(replicas, tmp_path_factory):
    r = RouterProcess([s.url for s in replicas], tmp_path_factory.mktemp("router") / "router.log")
    yield r
    r.stop()


def finished(server):
    return server.server_info()["num_finished"]


def settled_counts(replicas, before, total, timeout=30):
    """Requests each replica finished since `before`, once they add up to `total`: a replica's
    counters are a snapshot its scheduler publishes, which can trail the last reply a little."""
    deadline = time.time() + timeout
    while True:
        counts = [finished(s) - b for s, b in zip(replicas, before)]
        if sum(counts) >= total or time.time() > deadline:
            return counts
        time.sleep(0.05)


def generate(router, text):
    body = {"text": text, "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
    r = requests.post(router.url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, f"{r.status_code} {r.text}\n{router.log_tail()}"
    return r.json()["meta_info"]


def test_cache_aware_routing_keeps_each_prefix_on_one_replica(router, replicas):
    """4 prefixes x 16 suffixes through the router. The first request of each prefix goes out
    together: with no prefix matched, the policy picks the replica with the fewest requests in
    flight, so the prefixes spread over both replicas (sent one at a time, all would land on the
    same one: the loads tie at 0). Then each prefix's other 15 requests, 8 at a time: all must go to
    one replica (counted by its finished requests) and hit its radix cache for the prefix."""
    texts = {t: [prefix(t) + f"What is fact number {k} about it?" for k in range(SUFFIXES_PER_PREFIX)] for t in TOPICS}
    with ThreadPoolExecutor(max_workers=8) as pool:
        before = [finished(s) for s in replicas]
        firsts = list(pool.map(lambda t: generate(router, texts[t][0]), TOPICS))
        spread = settled_counts(replicas, before, len(TOPICS))
        print(f"first requests per replica: {spread}")
        assert sum(spread) == len(TOPICS) and all(n > 0 for n in spread), spread
        for p, topic in enumerate(TOPICS):
            before = [finished(s) for s in replicas]
            metas = list(pool.map(lambda t: generate(router, t), texts[topic][1:]))
            served = settled_counts(replicas, before, SUFFIXES_PER_PREFIX - 1)
            assert sorted(served) == [0, SUFFIXES_PER_PREFIX - 1], f"prefix {p} split across replicas: {served}"
            prompt_tokens = firsts[p]["prompt_tokens"]
            hits = [m["cached_tokens"] for m in metas]
            print(f"prefix {p} -> replica {served.index(SUFFIXES_PER_PREFIX - 1)}: prompt {prompt_tokens} tokens, "
                  f"cached {min(hits)}..{max(hits)} in each later request")
            # The prefix is cached on one replica only (its first request's): every hit proves the
            # request went where the first one did.
            assert all(h >= prompt_tokens // 2 for h in hits), f"prefix {p}: cached tokens {hits} of {prompt_tokens}"
    for s in replicas:
        info = s.server_info()
        print(f"{s.url}: {info['num_finished']} requests, radix hit rate {info['radix_hit_rate']:.2f}")
        assert info["radix_hit_rate"] > 0.5, info


def test_chat_through_the_router(router):
    """OpenAI chat through the router, naming the model (without one the router sends "unknown")."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 12, "temperature": 0}
    r = requests.post(router.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert "Paris" in r.json()["choices"][0]["message"]["content"]


def test_what_the_router_polls(replicas):
    s = replicas[0]
    for path in ("/health", "/get_model_info", "/model_info", "/get_server_info", "/server_info"):
        assert s.get(path).status_code == 200, path
    assert s.get("/model_info").json()["served_model_name"] == MODEL
    load = s.get("/get_load").json()
    # SGLang's shape: one object per data-parallel rank.
    assert isinstance(load, list) and len(load) == 1, load
    assert set(load[0]) == {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}, load
    assert load[0]["num_reqs"] == 0 and load[0]["num_tokens"] >= 0


SGLANG_METRICS = {
    "sglang:num_running_reqs": "gauge", "sglang:num_queue_reqs": "gauge", "sglang:num_used_tokens": "gauge",
    "sglang:token_usage": "gauge", "sglang:cache_hit_rate": "gauge",
    "sglang:prompt_tokens_total": "counter", "sglang:generation_tokens_total": "counter",
    "sglang:cached_tokens_total": "counter", "sglang:num_requests_total": "counter",
    "sglang:time_to_first_token_seconds": "histogram", "sglang:inter_token_latency_seconds": "histogram",
    "sglang:e2e_request_latency_seconds": "histogram"}


def test_metrics_have_sglang_names(replicas):
    s = replicas[0]
    s.generate(text="Count from one to five:", sampling_params={"max_new_tokens": 6, "temperature": 0,
                                                                 "ignore_eos": True})
    text = s.get("/metrics").text
    for name, kind in SGLANG_METRICS.items():
        assert f"# TYPE {name} {kind}\n" in text, name
    samples = [line for line in text.splitlines() if line.startswith("sglang:")]
    assert samples and all(f'model_name="{MODEL}"' in line for line in samples), samples
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in samples}
    assert values[f'sglang:generation_tokens_total{{model_name="{MODEL}"}}'] >= 6
    assert values[f'sglang:inter_token_latency_seconds_count{{model_name="{MODEL}"}}'] >= 5
    assert values[f'sglang:time_to_first_token_seconds_count{{model_name="{MODEL}"}}'] >= 1
    assert 0 <= values[f'sglang:token_usage{{model_name="{MODEL}"}}'] <= 1


def test_metrics_pass_promtool(replicas):
    """promtool parses the whole exposition; its linter finds nothing in serve8's names and only
    the colon in SGLang's (SGLang's own server is flagged the same way: the names are its)."""
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool is not installed (Debian's prometheus package)")
    text = replicas[0].get("/metrics").text
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    # 0: clean; 3: lint findings only; 1: the text did not parse.
    assert r.returncode in (0, 3), r.stdout + r.stderr
    findings = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    unexpected = [f for f in findings
                  if not (f.startswith("sglang:") and f.endswith("metric names should not contain ':'"))]
    assert not unexpected, "\n".join(unexpected)


def test_metrics_parse_with_prometheus_client(replicas):
    parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client is not installed")
    families = {f.name: f for f in parser.text_string_to_metric_families(replicas[0].get("/metrics").text)}
    # The client drops a counter's _total from its family name.
    for name, kind in SGLANG_METRICS.items():
        family = families[name.removesuffix("_total") if kind == "counter" else name]
        assert family.type == kind, name
        assert all(sample.labels.get("model_name") == MODEL for sample in family.samples), name

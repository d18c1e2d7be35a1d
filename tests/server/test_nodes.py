"""Tensor parallelism across processes (--nnodes, --node-rank, --dist-init-addr) on the CPU:
node 0 schedules and serves, the other nodes run its steps over Gloo; greedy ids must equal
tp=1's, and the other nodes must exit when node 0 stops."""
import concurrent.futures
import os
import subprocess

import pytest

from conftest import REPO_ROOT, free_port, serve8_bin

PROMPTS = [[1, 403, 407, 261, 378], [1, 306, 256, 211], [1, 403, 407, 261, 378, 1, 2, 3, 4, 5, 6, 7], [1, 9]]


def start_node(args, rank, log_path):
    """A node other than 0: no HTTP, it runs node 0's steps until node 0 stops."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    log = open(log_path, "w")
    proc = subprocess.Popen([serve8_bin(), "serve"] + args + ["--node-rank", str(rank)], cwd=REPO_ROOT, stdout=log,
                            stderr=subprocess.STDOUT, env=env)
    return proc, log


def greedy(server, ids, n=24):
    out = server.generate(input_ids=ids, sampling_params={"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
    return out["output_ids"]


def all_greedy(server):
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # in one batch, as well as alone
        together = list(pool.map(lambda p: greedy(server, p), PROMPTS))
    alone = [greedy(server, p) for p in PROMPTS]
    return together, alone


@pytest.fixture(scope="module")
def reference(start_server, stories_dir):
    s = start_server(["--model-path", str(stories_dir), "--device", "cpu", "--max-total-tokens", "4096"])
    return [greedy(s, p) for p in PROMPTS]


@pytest.mark.parametrize("tp,nnodes", [(2, 2), (4, 2)])
def test_nodes_give_tp1_greedy_ids(start_server, stories_dir, reference, tmp_path, tp, nnodes):
    addr = f"127.0.0.1:{free_port()}"
    common = ["--model-path", str(stories_dir), "--device", "cpu", "--max-total-tokens", "4096", "--tp-size",
              str(tp), "--nnodes", str(nnodes), "--dist-init-addr", addr]
    nodes = [start_node(common, r, tmp_path / f"node{r}.log") for r in range(1, nnodes)]
    try:
        server = start_server(common + ["--node-rank", "0"])
        together, alone = all_greedy(server)
        assert together == reference
        assert alone == reference
        server.stop()
        for proc, log in nodes:
            assert proc.wait(timeout=60) == 0, (tmp_path / "node1.log").read_text()[-3000:]
    finally:
        for proc, log in nodes:
            if proc.poll() is None:
                proc.kill()
            log.close()


@pytest.mark.parametrize("extra,message", [
    (["--nnodes", "2", "--tp-size", "2"], "--dist-init-addr"),
    (["--nnodes", "2", "--dist-init-addr", "127.0.0.1:1", "--tp-size", "3"], "multiple of --nnodes"),
    (["--nnodes", "2", "--dist-init-addr", "127.0.0.1", "--tp-size", "2"], "HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "127.0.0.1:1", "--tp-size", "2"], "--node-rank 2"),
])
def test_bad_node_flags_are_refused_by_name(stories_dir, extra, message):
    r = subprocess.run([serve8_bin(), "serve", "--model-path", str(stories_dir), "--device", "cpu", "--port",
                        str(free_port())] + extra, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert message in r.stdout + r.stderr

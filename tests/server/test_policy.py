"""Server policies: API key, request size limit, queue limit, and shutdown while streaming."""

import signal
import concurrent.futures
import socket
import threading
import time

import pytest
import requests

from conftest import post_raw


@pytest.fixture(scope="module")
def policy_server(start_server):
    return start_server(["--max-request-bytes", "4096", "--max-running-requests", "1",
                         "--max-queued-requests", "1", "--served-model-name", "tiny"], api_key="s3cret")


def test_api_key(policy_server):
    url = policy_server.url
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 1}}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"},
                    {"Authorization": "Bearer s3cret-and-more"}, {"Authorization": "Bearer s3cre"}):
        r = requests.post(url + "/generate", json=body, headers=headers, timeout=30)
        assert r.status_code == 401, headers
        assert r.json()["error"]["type"] == "authentication_error"
    assert requests.get(url + "/v1/models", timeout=30).status_code == 401
    assert requests.get(url + "/health", timeout=30).status_code == 200
    ok = requests.post(url + "/generate", json=body, headers={"Authorization": "Bearer s3cret"}, timeout=30)
    assert ok.status_code == 200, ok.text


def test_metrics_ask_for_the_key_only_when_told(policy_server, start_server):
    assert requests.get(policy_server.url + "/metrics", timeout=30).status_code == 200
    strict = start_server(["--metrics-require-api-key"], api_key="k3y")
    assert requests.get(strict.url + "/metrics", timeout=30).status_code == 401
    r = requests.get(strict.url + "/metrics", headers={"Authorization": "Bearer k3y"}, timeout=30)
    assert r.status_code == 200 and "serve8" in r.text


def test_request_too_large(policy_server):
    r = policy_server.post("/generate", {"text": "x" * 5000})
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert policy_server.get("/health").status_code == 200


def test_queue_limit_gives_503(policy_server):
    sp = b'"sampling_params": {"max_new_tokens": 2000, "temperature": 0, "ignore_eos": true}'
    auth = b"Authorization: Bearer s3cret\r\n"

    def start(text):
        body = b'{"text": "' + text + b'", "stream": true, ' + sp + b"}"
        s = socket.create_connection(("127.0.0.1", policy_server.port))
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        return s

    running = start(b"first")
    deadline = time.time() + 10
    while policy_server.server_info()["num_running_reqs"] < 1 and time.time() < deadline:
        time.sleep(0.02)
    queued = start(b"second")
    while policy_server.server_info()["num_waiting_reqs"] < 1 and time.time() < deadline:
        time.sleep(0.02)
    r = policy_server.post("/generate", {"text": "third", "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "overloaded"
    running.close()
    queued.close()
    policy_server.assert_all_slots_free()


def test_queue_limit_counts_only_waiting_requests(start_server):
    """--max-queued-requests bounds the queue, not the running batch: a burst of 20 on an idle
    server that runs 64 at once is all admitted with a queue limit of 8."""
    server = start_server(["--max-running-requests", "64", "--max-queued-requests", "8"])
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
    barrier = threading.Barrier(20)

    def one(_):
        barrier.wait()
        return server.post("/generate", body).status_code

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        codes = list(pool.map(one, range(20)))
    assert codes == [200] * 20, codes
    server.assert_all_slots_free()


def test_sigterm_while_streaming_exits_cleanly(start_server, stories_dir):
    server = start_server(["--model-path", str(stories_dir)])
    s = post_raw(server, b'{"input_ids": [1, 5, 6], "stream": true, "sampling_params": '
                         b'{"max_new_tokens": 400, "temperature": 0, "ignore_eos": true}}')
    data = b""
    s.settimeout(30)
    while b"data: " not in data:
        data += s.recv(65536)
    server.proc.send_signal(signal.SIGTERM)  # the request is running: it may finish (drain)
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        if data.endswith(b"0\r\n\r\n"):
            break
    s.close()
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    assert b"data: [DONE]" in data
    server.proc.wait(timeout=30)
    server.stop()  # asserts exit status 0

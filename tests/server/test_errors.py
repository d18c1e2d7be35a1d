"""Bad input gets a 4xx with OpenAI's error body, and the server keeps serving."""

import time

import openai
import pytest
import requests

from conftest import REPO_ROOT


def check_error(server, r, status, param=None):
    assert r.status_code == status, f"{r.status_code}: {r.text}"
    body = r.json()
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert err["type"] in ("invalid_request_error", "authentication_error", "server_error")
    if param is not None:
        assert err["param"] == param, err
    assert server.get("/health").status_code == 200
    return err


def raw_post(server, path, data, content_type="application/json"):
    headers = dict(server.headers())
    if content_type:
        headers["Content-Type"] = content_type
    return requests.post(server.url + path, data=data, headers=headers, timeout=60)


GENERATE_400 = [
    ({}, "text"),
    ({"text": 5}, "text"),
    ({"text": ""}, "text"),
    ({"text": ["ok", 3]}, "text"),
    ({"text": "hi", "input_ids": [1]}, "text"),
    ({"text": "hi", "sampling_params": {"temperature": "hot"}}, "sampling_params.temperature"),
    ({"text": "hi", "sampling_params": {"temperature": -1}}, None),
    ({"text": "hi", "sampling_params": {"top_p": 0}}, None),
    ({"text": "hi", "sampling_params": {"top_p": 1.5}}, None),
    ({"text": "hi", "sampling_params": {"top_k": 0}}, None),
    ({"text": "hi", "sampling_params": {"max_new_tokens": -1}}, "sampling_params.max_new_tokens"),
    ({"text": "hi", "sampling_params": {"max_new_tokens": 10**9}}, "sampling_params.max_new_tokens"),
    ({"text": "hi", "sampling_params": {"max_new_tokens": 10**30}}, "sampling_params.max_new_tokens"),
    # Sized from the served model's context length (2048 built in, 4096 for Llama-2-7B on the GPU).
    (lambda ctx: {"text": "hi", "sampling_params": {"max_new_tokens": ctx}}, "sampling_params.max_new_tokens"),
    ({"text": "hi", "sampling_params": {"max_new_tokens": "many"}}, "sampling_params.max_new_tokens"),
    ({"text": "hi", "sampling_params": {"stop": 3}}, "sampling_params.stop"),
    ({"text": "hi", "sampling_params": {"stop": [""]}}, "sampling_params.stop"),
    ({"text": "hi", "sampling_params": {"tempreature": 0}}, "sampling_params.tempreature"),
    ({"text": "hi", "sampling_params": {"frequency_penalty": 2.5}}, None),
    ({"text": "hi", "sampling_params": {"presence_penalty": "much"}}, "sampling_params.presence_penalty"),
    ({"text": "hi", "sampling_params": {"repetition_penalty": 0}}, None),
    ({"text": "hi", "sampling_params": {"min_new_tokens": 50, "max_new_tokens": 10}}, None),
    ({"text": "hi", "sampling_params": {"logit_bias": {"abc": 1}}}, "sampling_params.logit_bias"),
    ({"text": "hi", "sampling_params": {"logit_bias": {"5": 101}}}, None),
    ({"text": "hi", "sampling_params": {"logit_bias": {"99999999": 1}}}, None),
    ({"text": "hi", "sampling_params": {"stop_token_ids": [99999999]}}, None),
    ({"text": "hi", "sampling_params": []}, "sampling_params"),
    ({"text": "hi", "sampling_params": "greedy"}, "sampling_params"),
    ({"text": "hi", "stream": "yes"}, "stream"),
    ({"text": "hi", "return_logprob": "yes"}, "return_logprob"),
    ({"text": "hi", "return_logprob": True, "top_logprobs_num": 21}, "top_logprobs_num"),
    ({"text": "hi", "return_logprob": True, "logprob_start_len": -2}, "logprob_start_len"),
    ({"text": "hi", "return_logprob": True, "logprob_start_len": 99}, "logprob_start_len"),
    ({"text": ["a", "b"], "rid": "same"}, "rid"),
    ({"text": "hi", "rid": "x\n[error] forged log line"}, "rid"),
    ({"text": "hi", "rid": "x" * 257}, "rid"),
    ({"input_ids": []}, "input_ids"),
    ({"input_ids": [1, 2.5]}, "input_ids"),
    ({"input_ids": [1, -3]}, "input_ids"),
    ({"input_ids": [1, 32000]}, "input_ids"),
    ({"input_ids": "1 2 3"}, "input_ids"),
    (lambda ctx: {"input_ids": [1] * ctx}, "input_ids"),
    (lambda ctx: {"input_ids": [1] * (2 * ctx + 1)}, "input_ids"),
]


@pytest.mark.parametrize("body,param", GENERATE_400)
def test_generate_bad_input(text_server, body, param):
    if callable(body):
        body = body(text_server.get("/get_model_info").json()["context_length"])
    check_error(text_server, text_server.post("/generate", body), 400, param)


def test_malformed_json(text_server):
    for data in (b"{bad json", b"", b"[1, 2]", b"null", b'{"text": "x"', b"\x00\x01"):
        for path in ("/generate", "/v1/completions", "/v1/chat/completions"):
            check_error(text_server, raw_post(text_server, path, data), 400)


def test_invalid_utf8(text_server):
    for data in (b'{"text": "\xff\xfe"}', b'{"text": "ok \xc3"}', b'{"text": "\\udc00"}',
                 b'{"model": "tiny", "prompt": "\xed\xa0\x80"}'):
        err = check_error(text_server, raw_post(text_server, "/generate", data), 400)
        assert "JSON" in err["message"] or "UTF-8" in err["message"]


def test_wrong_content_type(text_server):
    r = raw_post(text_server, "/generate", b"text=hello", "application/x-www-form-urlencoded")
    assert check_error(text_server, r, 415)["code"] == "unsupported_media_type"
    r = raw_post(text_server, "/v1/completions", b'{"prompt": "x"}', "text/plain")
    check_error(text_server, r, 415)


def test_unknown_route(text_server):
    check_error(text_server, text_server.get("/v2/nothing"), 404)
    check_error(text_server, text_server.post("/v1/embeddings", {"input": "x"}), 404)


COMPLETIONS_400 = [
    ({"model": "tiny"}, "prompt"),
    ({"model": "tiny", "prompt": ""}, "prompt"),
    ({"model": "tiny", "prompt": []}, "prompt"),
    ({"model": "tiny", "prompt": 42}, "prompt"),
    ({"model": "tiny", "prompt": "x", "max_tokens": -5}, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "max_tokens": 10**12}, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "max_tokens": 5000}, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "temperature": -0.5}, None),
    ({"model": "tiny", "prompt": "x", "temperature": "0"}, "temperature"),
    ({"model": "tiny", "prompt": "x", "top_p": 0.0}, None),
    ({"model": "tiny", "prompt": "x", "top_p": 2}, None),
    ({"model": "tiny", "prompt": "x", "n": 0}, "n"),
    ({"model": "tiny", "prompt": "x", "n": 129}, "n"),
    ({"model": "tiny", "prompt": "x", "logprobs": 21}, "logprobs"),
    ({"model": "tiny", "prompt": "x", "echo": "yes"}, "echo"),
    ({"model": "tiny", "prompt": "x", "stop": {"a": 1}}, "stop"),
    ({"model": "tiny", "prompt": "x", "stream_options": 3}, "stream_options"),
    (lambda ctx: {"model": "tiny", "prompt": "hello " * (ctx + 1000)}, "prompt"),
]


@pytest.mark.parametrize("body,param", COMPLETIONS_400)
def test_completions_bad_input(text_server, body, param):
    if callable(body):
        body = body(text_server.get("/get_model_info").json()["context_length"])
    check_error(text_server, text_server.post("/v1/completions", body), 400, param)


CHAT_400 = [
    ({"model": "tiny"}, "messages"),
    ({"model": "tiny", "messages": []}, "messages"),
    ({"model": "tiny", "messages": "hi"}, "messages"),
    ({"model": "tiny", "messages": [{"content": "no role"}]}, "messages[0].role"),
    ({"model": "tiny", "messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
    ({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
    ({"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}, "messages"),
    ({"model": "tiny", "messages": [{"role": "assistant", "content": "x"}]}, "messages"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, "top_logprobs"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
     "top_logprobs"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "max_tokens"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": -2}, None),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
     "tools[0].function"),
]


@pytest.mark.parametrize("body,param", CHAT_400)
def test_chat_bad_input(text_server, body, param):
    check_error(text_server, text_server.post("/v1/chat/completions", body), 400, param)


def test_unknown_model(text_server):
    for path, body in (("/v1/completions", {"model": "gpt-4", "prompt": "x"}),
                       ("/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})):
        err = check_error(text_server, text_server.post(path, body), 404, "model")
        assert err["code"] == "model_not_found"


def test_openai_client_sees_errors(text_server):
    client = openai.OpenAI(base_url=text_server.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x", temperature=-1)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], n=200)


def test_text_without_tokenizer(ids_server):
    for path, body in (("/generate", {"text": "hello"}),
                       ("/v1/completions", {"model": ids_server.served_name, "prompt": "hello"}),
                       ("/v1/chat/completions",
                        {"model": ids_server.served_name, "messages": [{"role": "user", "content": "x"}]}),
                       ("/generate", {"input_ids": [1, 2], "sampling_params": {"stop": "x"}})):
        err = check_error(ids_server, ids_server.post(path, body), 400)
        assert "tokenizer" in err["message"]
    # Token ids still work on the same server, through both APIs.
    assert ids_server.post("/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}).ok
    r = ids_server.post("/v1/completions", {"model": ids_server.served_name, "prompt": [1, 2, 3], "max_tokens": 2})
    assert r.ok, r.text


def test_chat_without_template(start_server):
    """A tokenizer whose files carry no chat template (a base model's) serves completions only."""
    s = start_server(["--model-path", "builtin:tiny-llama", "--tokenizer-path",
                      str(REPO_ROOT / "tests" / "golden" / "bpe" / "gpt2"), "--max-total-tokens", "1024"])
    err = check_error(s, s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}), 400,
                      "messages")
    assert "no chat template; use /v1/completions" in err["message"]
    r = s.post("/v1/completions", {"prompt": "hello", "max_tokens": 2})
    assert r.ok, r.text


# ---- every route: wrong methods, bodies of the smaller routes, refusals while busy ----

# (method, path, body or None, expected status). GET-only routes refuse POST and vice versa; the
# answer is always OpenAI's error body.
ROUTE_ERRORS = [
    ("POST", "/v1/models", b"{}", 404),
    ("DELETE", "/v1/models", None, 404),
    ("GET", "/v1/completions", None, 404),
    ("GET", "/v1/chat/completions", None, 404),
    ("GET", "/generate", None, 404),
    ("PUT", "/generate", b"{}", 404),
    ("POST", "/get_server_info", b"{}", 404),
    ("POST", "/server_info", b"{}", 404),
    ("POST", "/get_model_info", b"{}", 404),
    ("POST", "/health", b"{}", 404),
    ("POST", "/health_generate", b"{}", 404),
    ("POST", "/metrics", b"{}", 404),
    ("GET", "/abort_request", None, 404),
    ("GET", "/v1", None, 404),
    ("GET", "/v1/models/../../etc/passwd", None, 404),
    ("GET", "/%2e%2e/%2e%2e/etc/passwd", None, 404),
    ("POST", "/abort_request", b"{bad", 400),
    ("POST", "/abort_request", b"[]", 400),
    ("POST", "/abort_request", b"{}", 400),
    ("POST", "/abort_request", b'{"rid": 5}', 400),
    ("POST", "/abort_request", b'{"rid": ["a"]}', 400),
]


@pytest.mark.parametrize("method,path,data,status", ROUTE_ERRORS)
def test_route_errors(text_server, method, path, data, status):
    headers = dict(text_server.headers())
    if data is not None:
        headers["Content-Type"] = "application/json"
    r = requests.request(method, text_server.url + path, data=data, headers=headers, timeout=60)
    check_error(text_server, r, status)


def test_wrong_content_type_every_json_route(text_server):
    for path in ("/generate", "/v1/completions", "/v1/chat/completions", "/abort_request"):
        for ctype in ("text/plain", "multipart/form-data; boundary=x", "application/xml"):
            r = raw_post(text_server, path, b'{"rid": "x", "text": "hi"}', ctype)
            assert check_error(text_server, r, 415)["code"] == "unsupported_media_type", (path, ctype)


def test_invalid_utf8_every_route(text_server):
    bad = [
        ("/v1/completions", b'{"model": "tiny", "prompt": "\xc0\xaf"}'),
        ("/v1/completions", b'{"model": "tiny", "prompt": ["ok", "\xf8\x88\x80\x80\x80"]}'),
        ("/v1/chat/completions", b'{"model": "tiny", "messages": [{"role": "user", "content": "\xff"}]}'),
        ("/v1/chat/completions", b'{"model": "\xfe", "messages": [{"role": "user", "content": "x"}]}'),
        ("/generate", b'{"text": "ok", "sampling_params": {"stop": ["\x80"]}}'),
        ("/abort_request", b'{"rid": "\xff\xff"}'),
    ]
    for path, data in bad:
        err = check_error(text_server, raw_post(text_server, path, data), 400)
        assert "JSON" in err["message"] or "UTF-8" in err["message"], (path, err)


def test_pathological_json(text_server):
    """Deep nesting, huge numbers and very long keys parse (or fail) cleanly; none reaches the engine."""
    deep = b'{"text": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    for path in ("/generate", "/v1/completions", "/v1/chat/completions"):
        check_error(text_server, raw_post(text_server, path, deep), 400)
    for data in (b'{"input_ids": [1, 1e400]}', b'{"input_ids": [1, 99999999999999999999999999]}',
                 b'{"text": "hi", "sampling_params": {"temperature": 1e999}}',
                 b'{"text": "hi", "sampling_params": {"max_new_tokens": 1.5}}',
                 b'{"text": "hi", "sampling_params": {"max_new_tokens": NaN}}',
                 b'{"' + b"k" * 100000 + b'": 1}'):
        check_error(text_server, raw_post(text_server, "/generate", data), 400)


MORE_SAMPLING_400 = [
    {"top_k": -7}, {"min_p": 1.5}, {"min_p": -0.1}, {"top_k": 1.5}, {"top_p": -0.5},
    {"max_new_tokens": 0.5}, {"max_new_tokens": True}, {"stop_token_ids": [-1]}, {"stop_token_ids": "2"},
    {"ignore_eos": "yes"}, {"seed": "x"}, {"n": 0}, {"n": 129},
]


@pytest.mark.parametrize("sp", MORE_SAMPLING_400)
def test_more_out_of_range_sampling(text_server, sp):
    check_error(text_server, text_server.post("/generate", {"text": "hi", "sampling_params": sp}), 400)


def test_unknown_top_level_fields_are_ignored(text_server):
    """Like SGLang (and OpenAI's SDKs, which send extra fields), unknown top-level fields are
    ignored; unknown sampling parameters are refused (test_generate_bad_input)."""
    r = text_server.post("/generate", {"text": "hi", "bogus": {"a": [1]}, "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 200, r.text
    r = text_server.post("/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 1, "user": "u",
                                             "bogus": 1})
    assert r.status_code == 200, r.text


def test_batches_with_a_bad_item_are_refused_whole(text_server):
    """A batch with one bad prompt or parameter is refused before anything runs."""
    text_server.assert_all_slots_free()  # the earlier tests' requests counted as finished first
    before = text_server.server_info()["num_finished"]
    sp_ok = {"max_new_tokens": 2}
    for path, body, param in (
        ("/generate", {"text": ["fine", ""]}, "text"),
        ("/generate", {"text": ["fine", "also fine", None]}, "text"),
        ("/generate", {"input_ids": [[1, 2, 3], [1, -1]]}, "input_ids"),
        ("/generate", {"input_ids": [[1, 2, 3], []]}, "input_ids"),
        ("/generate", {"input_ids": [[1, 2, 3], 7]}, "input_ids"),
        ("/generate", {"input_ids": [[1, 2], [1, 3]], "sampling_params": [sp_ok, {"temperature": -1}]}, None),
        ("/generate", {"input_ids": [[1, 2], [1, 3]], "sampling_params": [sp_ok]}, "sampling_params"),
        ("/generate", {"input_ids": [[1, 2], [1, 3]], "rid": ["a", 5]}, "rid"),
        ("/generate", {"input_ids": [[1, 2], [1, 3]], "rid": ["a", "a"]}, "rid"),
        ("/v1/completions", {"model": "tiny", "prompt": ["fine", 5]}, "prompt"),
        ("/v1/completions", {"model": "tiny", "prompt": ["fine", ""]}, "prompt"),
        ("/v1/completions", {"model": "tiny", "prompt": [[1, 2], [1, "x"]]}, "prompt"),
        ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}, 5]}, None),
    ):
        check_error(text_server, text_server.post(path, body), 400, param)
    info = text_server.server_info()
    assert info["num_finished"] == before and info["num_running_reqs"] == 0


def test_http_level_garbage(text_server):
    """Requests the HTTP parser refuses (bad request line, bad Content-Length) close cleanly; the
    server keeps serving."""
    import socket
    for raw in (b"GARBAGE\r\n\r\n",
                b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: abc\r\n\r\n{}",
                b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: -5\r\n\r\n{}",
                b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS ClientHello
                b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"):
        s = socket.create_connection(("127.0.0.1", text_server.port), timeout=30)
        s.sendall(raw)
        reply = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                reply += chunk
                if b"\r\n\r\n" in reply:
                    break
        except (ConnectionResetError, TimeoutError):
            pass
        s.close()
        assert not reply or reply.startswith(b"HTTP/1.1 4"), (raw[:40], reply[:200])
        assert text_server.get("/health").status_code == 200


def test_flush_cache_refused_while_busy(text_server):
    from conftest import post_raw
    s = post_raw(text_server, b'{"text": "busy", "stream": true, "sampling_params": '
                              b'{"max_new_tokens": 1500, "ignore_eos": true}}')
    got = b""
    while b"data: " not in got:
        chunk = s.recv(65536)
        assert chunk
        got += chunk
    err = check_error(text_server, text_server.post("/flush_cache"), 400)
    assert "running" in err["message"]
    s.close()


@pytest.fixture(scope="module")
def small_body_server(start_server):
    return start_server(["--max-request-bytes", "2048", "--served-model-name", "tiny", "--max-total-tokens", "2048"])


def test_oversized_body_every_route(small_body_server):
    s = small_body_server
    pad = "x" * 3000
    for path, body in (("/generate", {"text": pad}), ("/v1/completions", {"model": "tiny", "prompt": pad}),
                       ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": pad}]}),
                       ("/abort_request", {"rid": pad}), ("/flush_cache", {"pad": pad})):
        err = check_error(s, s.post(path, body), 413)
        assert "--max-request-bytes" in err["message"], (path, err)
    # Just under the limit is fine.
    assert s.post("/generate", {"text": "y" * 100, "sampling_params": {"max_new_tokens": 1}}).status_code == 200
    s.assert_all_slots_free()


def test_still_serving_and_slots_free(text_server, ids_server):
    r = text_server.generate(text="still alive", sampling_params={"max_new_tokens": 3})
    assert r["meta_info"]["completion_tokens"] >= 1
    text_server.assert_all_slots_free()
    ids_server.assert_all_slots_free()


@pytest.mark.parametrize("part_type", [5, None, ["text"], {"t": "text"}, True, "image_url"])
def test_chat_content_part_of_any_type_is_a_400(text_server, part_type):
    """A content part whose "type" is not the string "text" is the client's error, never a 500."""
    body = {"model": "tiny", "max_tokens": 1,
            "messages": [{"role": "user", "content": [{"type": part_type, "text": "hi"}]}]}
    check_error(text_server, text_server.post("/v1/chat/completions", body), 400, "messages[0].content")


def test_openai_temperature_above_two_is_refused(text_server):
    """OpenAI's temperature range is [0, 2]; SGLang's /generate has no upper bound."""
    for path, body in (("/v1/chat/completions", {"model": "tiny", "max_tokens": 1, "temperature": 2.5,
                                                 "messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/completions", {"model": "tiny", "max_tokens": 1, "temperature": 2.01, "prompt": "hi"})):
        check_error(text_server, text_server.post(path, body), 400, "temperature")
    ok = text_server.post("/v1/completions", {"model": "tiny", "max_tokens": 1, "temperature": 2.0, "prompt": "hi"})
    assert ok.status_code == 200, ok.text
    r = text_server.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 1, "temperature": 3.0}})
    assert r.status_code == 200, r.text


def test_a_text_too_long_for_the_context_is_refused_before_tokenizing(text_server):
    """5 MB of text cannot fit the context whatever it tokenizes to: a 400 at once, not seconds of
    tokenizing first."""
    text = "lorem ipsum dolor sit amet " * 200_000
    for path, body, param in (("/generate", {"text": text}, "text"),
                              ("/v1/completions", {"model": "tiny", "prompt": text}, "prompt"),
                              ("/v1/chat/completions", {"model": "tiny",
                                                        "messages": [{"role": "user", "content": text}]}, "messages")):
        t0 = time.time()
        err = check_error(text_server, text_server.post(path, body), 400, param)
        assert time.time() - t0 < 2.0, path
        assert "maximum context length" in err["message"]

"""Bad input gets a 4xx with OpenAI's error body, and the server keeps serving."""

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
    ({"text": "hi", "sampling_params": {"frequency_penalty": 0.5}}, "sampling_params.frequency_penalty"),
    ({"text": "hi", "sampling_params": {"stop_token_ids": [99999999]}}, None),
    ({"text": "hi", "sampling_params": []}, "sampling_params"),
    ({"text": "hi", "sampling_params": "greedy"}, "sampling_params"),
    ({"text": "hi", "stream": "yes"}, "stream"),
    ({"text": "hi", "return_logprob": True}, "return_logprob"),
    ({"text": ["a", "b"], "rid": "same"}, "rid"),
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
    ({"model": "tiny", "prompt": "x", "n": 2}, "n"),
    ({"model": "tiny", "prompt": "x", "logprobs": 3}, "logprobs"),
    ({"model": "tiny", "prompt": "x", "echo": True}, "echo"),
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
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "logprobs": True}, "logprobs"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "max_tokens"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": -2}, None),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools"),
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
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], n=3)


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


def test_still_serving_and_slots_free(text_server, ids_server):
    r = text_server.generate(text="still alive", sampling_params={"max_new_tokens": 3})
    assert r["meta_info"]["completion_tokens"] >= 1
    text_server.assert_all_slots_free()
    ids_server.assert_all_slots_free()

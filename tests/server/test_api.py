"""The happy paths: OpenAI's client on /v1, SGLang's /generate, the info routes and /metrics."""

import math
import random
import re

import openai
import pytest
import requests

from conftest import read_sse


@pytest.fixture(scope="module")
def client(text_server):
    return openai.OpenAI(base_url=text_server.url + "/v1", api_key="unused", max_retries=0)


# --- OpenAI client --------------------------------------------------------------------------

def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_completion_and_stream_agree(client):
    kw = dict(model="tiny", prompt="Once upon a time", max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    c = client.completions.create(**kw)
    assert c.object == "text_completion"
    assert c.choices[0].finish_reason == "length"
    assert c.usage.completion_tokens == 24
    assert c.usage.prompt_tokens > 0
    assert c.usage.total_tokens == c.usage.prompt_tokens + 24
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == c.choices[0].text
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24


def test_chat_and_stream_agree(client, text_server):
    kw = dict(model="tiny", messages=[{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "Hello there!"}],
              max_tokens=20, temperature=0, extra_body={"ignore_eos": True})
    c = client.chat.completions.create(**kw)
    assert c.object == "chat.completion"
    assert c.choices[0].message.role == "assistant"
    assert c.choices[0].finish_reason == "length"
    assert c.usage.completion_tokens == 20
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    if text_server.batch_invariant():
        # The streamed request hits the radix cache the first one filled: the same ids regardless.
        assert text == c.choices[0].message.content
    else:
        assert text
    assert chunks[-1].usage.completion_tokens == 20
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)


def test_chat_stream_without_usage(client):
    chunks = list(client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0, stream=True))
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert all(ch.usage is None for ch in chunks)


def test_completions_batch_and_token_prompt(client, text_server):
    ids = text_server.generate(text="abc", sampling_params={"max_new_tokens": 1})["meta_info"]["prompt_tokens"]
    assert ids > 0
    c = client.completions.create(model="tiny", prompt=["one two", "three four"], max_tokens=4, temperature=0)
    assert sorted(ch.index for ch in c.choices) == [0, 1]
    c2 = client.completions.create(model="tiny", prompt=[1, 450, 4996], max_tokens=4, temperature=0)
    assert c2.usage.prompt_tokens == 3


def test_seeded_sampling_reproducible(client):
    kw = dict(model="tiny", prompt="The sky", max_tokens=12, temperature=0.9, top_p=0.9, seed=1234)
    assert client.completions.create(**kw).choices[0].text == client.completions.create(**kw).choices[0].text


# --- /generate --------------------------------------------------------------------------------

def test_generate_text(text_server):
    r = text_server.generate(text="Hello", sampling_params={"max_new_tokens": 8, "temperature": 0, "ignore_eos": True})
    m = r["meta_info"]
    assert m["finish_reason"] == {"type": "length", "length": 8}
    assert m["completion_tokens"] == 8 and len(r["output_ids"]) == 8
    assert m["prompt_tokens"] > 0 and "e2e_latency" in m and m["id"]
    assert isinstance(r["text"], str)


def test_generate_batch(text_server):
    sp = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
    single = [text_server.generate(text=t, sampling_params=sp)["output_ids"] for t in ("a b", "c d e")]
    batch = text_server.generate(text=["a b", "c d e"], sampling_params=sp)
    assert isinstance(batch, list) and [b["output_ids"] for b in batch] == single
    per_prompt = text_server.generate(text=["a b", "c d e"], sampling_params=[sp, dict(sp, max_new_tokens=3)])
    assert [b["meta_info"]["completion_tokens"] for b in per_prompt] == [6, 3]


def test_generate_rid(text_server):
    r = text_server.generate(text="x", rid="my-request-1", sampling_params={"max_new_tokens": 1})
    assert r["meta_info"]["id"] == "my-request-1"


def test_generate_input_ids(ids_server):
    sp = {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True}
    r = ids_server.generate(input_ids=[1, 20, 30, 40], sampling_params=sp)
    assert len(r["output_ids"]) == 10 and r["text"] == ""
    b = ids_server.generate(input_ids=[[1, 20, 30, 40], [1, 5]], sampling_params=sp)
    assert b[0]["output_ids"] == r["output_ids"]


def test_generate_stream(text_server):
    body = {"text": "Streaming test", "stream": True,
            "sampling_params": {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}}
    with text_server.post("/generate", body, stream=True) as r:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        events = read_sse(r)
    full = text_server.generate(**{k: v for k, v in body.items() if k != "stream"})
    texts = [e["text"] for e in events]
    assert all(full["text"].startswith(t) for t in texts), "streamed text must only grow"
    assert events[-1]["text"] == full["text"] and events[-1]["output_ids"] == full["output_ids"]
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert [e["meta_info"]["completion_tokens"] for e in events] == sorted(e["meta_info"]["completion_tokens"] for e in events)


def test_stop_string_truncates_and_stream_holds_back(text_server):
    sp = {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True}
    full = text_server.generate(text="The quick brown fox", sampling_params=sp)["text"]
    assert len(full) >= 12, full
    stop = full[8:12]
    expected = full[:full.find(stop)]
    r = text_server.generate(text="The quick brown fox", sampling_params=dict(sp, stop=stop))
    assert r["text"] == expected
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    body = {"text": "The quick brown fox", "stream": True, "sampling_params": dict(sp, stop=[stop, "\u2603never"])}
    with text_server.post("/generate", body, stream=True) as s:
        events = read_sse(s)
    assert all(expected.startswith(e["text"]) for e in events), "a stop-string prefix was streamed"
    assert events[-1]["text"] == expected


def test_stop_token_ids(ids_server):
    sp = {"max_new_tokens": 20, "temperature": 0, "ignore_eos": True}
    out = ids_server.generate(input_ids=[1, 7, 8, 9], sampling_params=sp)["output_ids"]
    stop_id = out[5]
    r = ids_server.generate(input_ids=[1, 7, 8, 9], sampling_params=dict(sp, stop_token_ids=[stop_id]))
    assert r["output_ids"] == out[:out.index(stop_id) + 1]
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}


def test_prefix_cache_hit_gives_same_output(ids_server):
    rng = random.Random(7)
    prefix = [1] + [rng.randrange(3, 512) for _ in range(80)]
    longer = prefix + [rng.randrange(3, 512) for _ in range(12)]
    sp = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
    assert ids_server.post("/flush_cache").status_code == 200
    cold = ids_server.generate(input_ids=longer, sampling_params=sp)
    assert cold["meta_info"]["cached_tokens"] == 0
    assert ids_server.post("/flush_cache").status_code == 200
    ids_server.generate(input_ids=prefix, sampling_params=sp)
    warm = ids_server.generate(input_ids=longer, sampling_params=sp)
    assert warm["meta_info"]["cached_tokens"] >= len(prefix)
    assert warm["output_ids"] == cold["output_ids"]
    again = ids_server.generate(input_ids=longer, sampling_params=sp)
    assert again["meta_info"]["cached_tokens"] > 0 and again["output_ids"] == cold["output_ids"]


def test_text_prefix_cache(text_server):
    sp = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
    prompt = "A long shared system prompt that many requests start with. " * 4
    first = text_server.generate(text=prompt + "Question one?", sampling_params=sp)
    second = text_server.generate(text=prompt + "Question one?", sampling_params=sp)
    assert second["meta_info"]["cached_tokens"] > 0
    assert second["output_ids"] == first["output_ids"]


# --- info routes ------------------------------------------------------------------------------

def test_health_generate(text_server, ids_server):
    assert text_server.get("/health_generate").status_code == 200
    assert ids_server.get("/health_generate").status_code == 200


def test_model_and_server_info(text_server):
    m = text_server.get("/get_model_info").json()
    assert m["is_generation"] is True and m["has_tokenizer"] is True and m["served_model_name"] == "tiny"
    info = text_server.server_info()
    for key in ("kv_cache_dtype", "max_total_num_tokens", "num_running_reqs", "num_waiting_reqs", "cached_tokens",
                "context_length", "internal_states"):
        assert key in info, key
    s = info["kv_slots"]
    assert s["total"] == 16384 and s["used"] == s["total"] - s["free"]


def parse_prometheus(text):
    """name -> list of (labels, value); fails on any line the text format does not allow."""
    samples = {}
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')
    for line in text.splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = line_re.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        samples.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    return samples


def test_metrics(text_server):
    text_server.generate(text="metrics", sampling_params={"max_new_tokens": 4})
    r = text_server.get("/metrics")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    s = parse_prometheus(r.text)
    for name in ("serve8_num_running_requests", "serve8_num_queued_requests", "serve8_kv_slots_used",
                 "serve8_kv_slots_free", "serve8_radix_cache_hit_rate", "serve8_prompt_tokens_total",
                 "serve8_generation_tokens_total", "serve8_time_to_first_token_seconds_bucket",
                 "serve8_step_seconds_bucket", "serve8_time_to_first_token_seconds_count"):
        assert name in s, name
    assert s["serve8_time_to_first_token_seconds_count"][0][1] > 0
    assert s["serve8_step_seconds_count"][0][1] > 0
    buckets = [v for _, v in s["serve8_step_seconds_bucket"]]
    assert buckets == sorted(buckets) and buckets[-1] == s["serve8_step_seconds_count"][0][1]


def test_all_slots_free_at_end(text_server, ids_server):
    text_server.assert_all_slots_free()
    ids_server.assert_all_slots_free()


def test_decode_step_counters(ids_server):
    """get_server_info counts decode-only steps and the KV tokens they read (the inputs of the
    decode model-bandwidth utilization): one request alone, prompt 5, 6 new tokens -> one prefill
    step of 5 prompt tokens, then 5 decode steps reading 6 + 7 + 8 + 9 + 10 KV tokens."""
    before = ids_server.server_info()
    prompt = [1] + [random.Random(77).randrange(3, 500) for _ in range(4)]
    out = ids_server.generate(input_ids=prompt, sampling_params={"max_new_tokens": 6, "ignore_eos": True})
    assert out["meta_info"]["completion_tokens"] == 6
    after = ids_server.server_info()
    assert after["decode_steps"] - before["decode_steps"] == 5
    assert after["decode_kv_tokens"] - before["decode_kv_tokens"] == 6 + 7 + 8 + 9 + 10
    assert after["decode_seconds"] > before["decode_seconds"]
    # The host's share of those steps (scheduling, batch building, bookkeeping) is part of them.
    host = after["decode_host_seconds"] - before["decode_host_seconds"]
    assert 0 < host < after["decode_seconds"] - before["decode_seconds"]
    assert 0 < after["decode_weight_bytes"] <= after["weight_bytes"]
    assert after["prefill_steps"] - before["prefill_steps"] == 1
    assert after["prefill_tokens"] - before["prefill_tokens"] == 5
    assert after["prefill_kv_tokens"] - before["prefill_kv_tokens"] == 5
    assert after["prefill_decode_rows"] == before["prefill_decode_rows"]
    assert after["prefill_seconds"] > before["prefill_seconds"]


def test_stream_of_a_request_that_finishes_at_once(text_server, client):
    """A request can finish (one token) before its stream starts; its output must still be sent."""
    body = {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 1}}
    with text_server.post("/generate", body, stream=True) as s:
        events = read_sse(s)
    assert len(events) == 1 and events[0]["meta_info"]["completion_tokens"] == 1
    assert events[0]["meta_info"]["finish_reason"]["type"] == "length"
    chunks = list(client.completions.create(model="tiny", prompt="Hello", max_tokens=1, stream=True))
    assert any(ch.choices and ch.choices[0].finish_reason == "length" for ch in chunks)


def test_tokenize_detokenize_version_and_model_by_id(text_server):
    r = text_server.post("/tokenize", {"model": "tiny", "prompt": "Once upon a time"})
    assert r.status_code == 200, r.text
    tok = r.json()
    assert tok["count"] == len(tok["tokens"]) > 1 and tok["max_model_len"] > 0
    plain = text_server.post("/tokenize", {"prompt": "Once upon a time", "add_special_tokens": False}).json()
    assert len(plain["tokens"]) <= tok["count"]
    back = text_server.post("/detokenize", {"model": "tiny", "tokens": plain["tokens"]}).json()
    assert back["prompt"] == back["text"] and back["text"].strip() == "Once upon a time"
    # The same ids /generate would prefill.
    g = text_server.post("/generate", {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 1},
                                       "return_logprob": False}).json()
    assert g["meta_info"]["prompt_tokens"] == tok["count"]
    for path, body, param in (("/tokenize", {"prompt": 5}, "prompt"), ("/tokenize", {}, "prompt"),
                              ("/detokenize", {"tokens": [1, -2]}, "tokens"),
                              ("/tokenize", {"model": "other", "prompt": "x"}, "model")):
        r = text_server.post(path, body)
        assert r.status_code in (400, 404), r.text
        assert r.json()["error"]["param"] == param
    v = text_server.get("/version")
    assert v.status_code == 200 and v.json()["version"].startswith("serve8")
    m = text_server.get("/v1/models/tiny")
    assert m.status_code == 200 and m.json()["id"] == "tiny" and m.json()["object"] == "model"
    missing = text_server.get("/v1/models/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_cors_only_for_allowed_origins(text_server, start_server):
    """No CORS headers by default; --allowed-origins names the origins (or '*') that get them."""
    pre = {"Origin": "http://example.com", "Access-Control-Request-Method": "POST"}
    r = requests.options(text_server.url + "/v1/chat/completions", timeout=30, headers=pre)
    assert r.status_code == 204 and "Access-Control-Allow-Origin" not in r.headers
    cors = start_server(["--allowed-origins", "http://example.com", "http://other.org"])
    r = requests.options(cors.url + "/v1/chat/completions", timeout=30, headers=pre)
    assert r.status_code == 204 and "POST" in r.headers["Access-Control-Allow-Methods"]
    assert r.headers["Access-Control-Allow-Origin"] == "http://example.com"
    got = requests.get(cors.url + "/v1/models", headers={"Origin": "http://other.org"}, timeout=30)
    assert got.headers["Access-Control-Allow-Origin"] == "http://other.org"
    stranger = requests.get(cors.url + "/v1/models", headers={"Origin": "http://evil.example"}, timeout=30)
    assert "Access-Control-Allow-Origin" not in stranger.headers
    star = start_server(["--allowed-origins", "*"])
    assert requests.get(star.url + "/v1/models", headers={"Origin": "http://a.b"},
                        timeout=30).headers["Access-Control-Allow-Origin"] == "*"


def test_chat_template_flag(start_server, tmp_path):
    """--chat-template replaces the tokenizer's template: a file, or the template text itself."""
    template = "{% for m in messages %}<<{{ m['role'] }}>>{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<<assistant>>{% endif %}"
    f = tmp_path / "t.jinja"
    f.write_text(template)
    # On the CPU with the built-in model wherever the suite runs: the flag is the tokenizer's
    # business, and a GPU shared by the suite's other servers has no room for two more models.
    for arg in (str(f), template):
        srv = start_server(["--model-path", "builtin:tiny-llama", "--device", "cpu", "--max-total-tokens", "4096",
                            "--chat-template", arg])
        ids = srv.post("/tokenize", {"prompt": "<<user>>hi<<assistant>>", "add_special_tokens": False}).json()["tokens"]
        r = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == len(ids), r.text
        srv.stop()


def test_n_choices_per_prompt(client, text_server):
    """n choices per prompt, in OpenAI's order (prompt i, choice j at index i * n + j); greedy
    choices are equal, seeded ones reproducible (where the backend is batch invariant: the choices
    run as separate requests, batched as they come); the prompt counts once in usage."""
    exact = text_server.batch_invariant()
    one = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=8, temperature=0)
    three = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=8, temperature=0, n=3)
    assert [c.index for c in three.choices] == [0, 1, 2]
    if exact:
        assert {c.text for c in three.choices} == {one.choices[0].text}
    assert three.usage.prompt_tokens == one.usage.prompt_tokens
    assert three.usage.completion_tokens == 3 * one.usage.completion_tokens
    batch = client.completions.create(model="tiny", prompt=["Once upon a time", "The cat"], max_tokens=4,
                                      temperature=0, n=2)
    texts = [c.text for c in sorted(batch.choices, key=lambda c: c.index)]
    assert len(texts) == 4 and (not exact or (texts[0] == texts[1] and texts[2] == texts[3]))
    kw = dict(model="tiny", messages=[{"role": "user", "content": "Tell me a story"}], max_tokens=12,
              temperature=1.0, seed=7, n=4)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    if exact:
        assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert len({c.message.content for c in a.choices}) > 1, "the seeded choices should differ"
    stream = client.chat.completions.create(**kw, stream=True)
    streamed = ["", "", "", ""]
    for chunk in stream:
        for c in chunk.choices:
            streamed[c.index] += c.delta.content or ""
    assert all(streamed) and (not exact or streamed == [c.message.content for c in a.choices])


def test_completions_echo(client, text_server):
    """echo puts the prompt before each choice's text, streamed or not, for text and id prompts."""
    plain = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6, temperature=0)
    echoed = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6, temperature=0,
                                       echo=True, n=2)
    assert [c.text for c in echoed.choices] == ["Once upon a time" + plain.choices[0].text] * 2
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="tiny", prompt="Once upon a time", max_tokens=6, temperature=0, echo=True, stream=True) if c.choices)
    assert streamed == echoed.choices[0].text
    ids = text_server.post("/tokenize", {"prompt": "Once upon a time", "add_special_tokens": False}).json()["tokens"]
    by_ids = text_server.post("/v1/completions", {"model": "tiny", "prompt": ids, "max_tokens": 6, "temperature": 0,
                                                  "echo": True}).json()
    assert by_ids["choices"][0]["text"].startswith("Once upon a time")
    r = text_server.post("/v1/chat/completions", {"model": "tiny", "echo": True,
                                                  "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo"


def test_penalties_and_logit_bias(client, text_server):
    """OpenAI's logit_bias forces a token; penalties and min_tokens are accepted on both APIs and
    SGLang's sampling_params (their effect is tested in tests/engine/penalties_test.cpp)."""
    forced = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4, temperature=0,
                                       logit_bias={"450": 100})
    expected = text_server.post("/detokenize", {"tokens": [450] * 4}).json()["text"]
    assert forced.choices[0].text.strip() == expected.strip()  # a decode alone drops the leading space
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                          temperature=0, presence_penalty=1.5, frequency_penalty=0.5,
                                          extra_body={"repetition_penalty": 1.2, "min_tokens": 3})
    assert chat.choices[0].finish_reason in ("length", "stop")
    r = text_server.post("/generate", {"text": "hi", "sampling_params": {
        "max_new_tokens": 4, "temperature": 0, "presence_penalty": 1.0, "frequency_penalty": 1.0,
        "repetition_penalty": 1.3, "min_new_tokens": 4, "logit_bias": {"450": 5}}})
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["completion_tokens"] == 4


def test_logprobs_of_generated_tokens(client, text_server):
    """Chat logprobs/top_logprobs, completions logprobs, SGLang's return_logprob: one entry per
    generated token; greedy picks the most likely token, whose logprob heads its top list; the
    probabilities of a top list are <= 1 in total and sorted."""
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                          temperature=0, logprobs=True, top_logprobs=3)
    content = chat.choices[0].logprobs.content
    # A stop token ends the output without being text: it has no entry.
    stopped = chat.choices[0].finish_reason == "stop"
    assert len(content) == chat.usage.completion_tokens - stopped
    for entry in content:
        assert len(entry.top_logprobs) == 3
        lps = [t.logprob for t in entry.top_logprobs]
        assert lps == sorted(lps, reverse=True) and sum(math.exp(x) for x in lps) <= 1.0 + 1e-5
        assert entry.top_logprobs[0].token == entry.token and abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-6
        assert entry.logprob <= 0.0 and bytes(entry.bytes).decode("utf-8", "replace") == entry.token
    streamed = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                              temperature=0, logprobs=True, top_logprobs=3, stream=True)
    tokens = [e.token for c in streamed if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert tokens == [e.token for e in content]

    comp = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=2)
    lp = comp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == \
        comp.usage.completion_tokens - (comp.choices[0].finish_reason == "stop")
    assert all(len(t) <= 2 and max(t.values()) == pytest.approx(x, abs=1e-6)
               for t, x in zip(lp.top_logprobs, lp.token_logprobs))
    assert lp.text_offset == sorted(lp.text_offset)

    r = text_server.post("/generate", {"text": "hi", "return_logprob": True, "top_logprobs_num": 2,
                                       "return_text_in_logprobs": True,
                                       "sampling_params": {"max_new_tokens": 3, "temperature": 0}}).json()
    meta = r["meta_info"]
    assert [t[1] for t in meta["output_token_logprobs"]] == r["output_ids"]
    assert all(len(top) == 2 and top[0][1] == tok[1] for top, tok in zip(meta["output_top_logprobs"],
                                                                        meta["output_token_logprobs"]))
    plain = text_server.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 3, "temperature": 0}})
    assert "output_token_logprobs" not in plain.json()["meta_info"]


def test_prompt_logprobs_are_the_generated_ones(client, text_server):
    """Prompt log probabilities (SGLang's logprob_start_len, completions' echo + logprobs) are what
    the model gave those tokens when it generated them: greedy output O of prompt P, then P + O as a
    prompt, its tokens from len(P) on, must carry O's log probabilities and top lists. A repeated
    request (its prefix now in the radix cache) gets the same values."""
    gen = text_server.post("/generate", {"text": "Once upon a time", "return_logprob": True, "top_logprobs_num": 2,
                                         "logprob_start_len": 0,
                                         "sampling_params": {"max_new_tokens": 6, "temperature": 0,
                                                             "ignore_eos": True}}).json()
    prompt = text_server.post("/tokenize", {"prompt": "Once upon a time"}).json()["tokens"]
    meta = gen["meta_info"]
    assert [t[1] for t in meta["input_token_logprobs"]] == prompt
    assert meta["input_token_logprobs"][0][0] is None and meta["input_top_logprobs"][0] is None
    assert all(t[0] <= 0.0 for t in meta["input_token_logprobs"][1:])
    ids = prompt + gen["output_ids"]
    for _ in range(2):
        again = text_server.post("/generate", {"input_ids": ids, "return_logprob": True, "top_logprobs_num": 2,
                                               "logprob_start_len": len(prompt),
                                               "sampling_params": {"max_new_tokens": 1, "temperature": 0}}).json()
        got = again["meta_info"]["input_token_logprobs"]
        assert [t[1] for t in got] == gen["output_ids"]
        # bf16 on the GPU: a prompt row and a decode row round differently.
        tol = 1e-4 if text_server.batch_invariant() else 0.1
        assert [t[0] for t in got] == pytest.approx([t[0] for t in meta["output_token_logprobs"]], abs=tol)
        if text_server.batch_invariant():
            assert [[x[1] for x in top] for top in again["meta_info"]["input_top_logprobs"]] == \
                [[x[1] for x in top] for top in meta["output_top_logprobs"]]
    comp = client.completions.create(model="tiny", prompt=ids, max_tokens=2, temperature=0, logprobs=1, echo=True)
    lp = comp.choices[0].logprobs
    assert len(lp.tokens) == len(ids) + 2 and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[len(prompt):len(ids)] == pytest.approx([t[0] for t in meta["output_token_logprobs"]],
                                                                   abs=1e-4 if text_server.batch_invariant() else 0.1)
    assert lp.text_offset == sorted(lp.text_offset)
    bad = text_server.post("/generate", {"input_ids": ids, "return_logprob": True, "logprob_start_len": len(ids),
                                         "sampling_params": {"max_new_tokens": 1}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "logprob_start_len"


def test_responses_api(client, text_server):
    """/v1/responses through the openai SDK: a string or a message list with instructions, whole
    or streamed as OpenAI's events, the same text as chat with the same messages."""
    r = client.responses.create(model="tiny", input="Tell me a story", max_output_tokens=8, temperature=0)
    assert r.object == "response" and r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Tell me a story"}],
                                          max_tokens=8, temperature=0)
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.output_tokens == 8 and r.usage.input_tokens == chat.usage.prompt_tokens
    listed = client.responses.create(model="tiny", instructions="Be brief.", max_output_tokens=4, temperature=0,
                                     input=[{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}])
    chat2 = client.chat.completions.create(model="tiny", max_tokens=4, temperature=0,
                                           messages=[{"role": "system", "content": "Be brief."},
                                                     {"role": "user", "content": "Hi"}])
    assert listed.output_text == chat2.choices[0].message.content
    events = list(client.responses.create(model="tiny", input="Tell me a story", max_output_tokens=8, temperature=0,
                                          stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == r.output_text == events[-1].response.output_text
    bad = text_server.post("/v1/responses", {"model": "tiny", "input": "x", "tools": [{"type": "function"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools[0].name"


def test_n_choices_prefill_their_prompt_once(client, text_server):
    """With n > 1 the prompt is prefilled once; every choice then starts from the radix cache."""
    prompt = "In a land far away " * 12
    r = client.completions.create(model="tiny", prompt=prompt, max_tokens=4, temperature=0.8, seed=3, n=4)
    cached = r.usage.prompt_tokens_details.cached_tokens
    assert cached >= 4 * (r.usage.prompt_tokens - 1), r.usage
    assert len(r.choices) == 4 and r.usage.completion_tokens == 16


def test_best_of_returns_the_most_likely_candidates(client, text_server):
    """best_of candidates per prompt, the n with the highest total log probability returned."""
    kw = dict(model="tiny", prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=11)
    all3 = client.completions.create(**kw, n=3, logprobs=0)
    totals = [sum(c.logprobs.token_logprobs) for c in sorted(all3.choices, key=lambda c: c.index)]
    best = client.completions.create(**kw, n=1, best_of=3)
    assert len(best.choices) == 1 and best.choices[0].logprobs is None
    assert best.usage.completion_tokens == 3 * 6
    if text_server.batch_invariant():
        texts = [c.text for c in sorted(all3.choices, key=lambda c: c.index)]
        assert best.choices[0].text == texts[totals.index(max(totals))]
    two = client.completions.create(**kw, n=2, best_of=3, logprobs=0)
    got = [sum(c.logprobs.token_logprobs) for c in two.choices]
    assert got == sorted(got, reverse=True) and [c.index for c in two.choices] == [0, 1]
    bad = text_server.post("/v1/completions", {**kw, "n": 3, "best_of": 2})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "best_of"
    assert text_server.post("/v1/completions", {**kw, "best_of": 2, "stream": True}).status_code == 400


def test_generate_with_n_samples(text_server):
    """SGLang's sampling_params.n: n samples of one prompt, as a list, their prompt prefilled once."""
    body = {"text": "In a land far away " * 8, "sampling_params": {"max_new_tokens": 4, "temperature": 1.0, "n": 3,
                                                                     "sampling_seed": 5}}
    r = text_server.post("/generate", body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert isinstance(out, list) and len(out) == 3
    assert all(o["meta_info"]["completion_tokens"] == 4 for o in out)
    assert sum(o["meta_info"]["cached_tokens"] for o in out) >= 3 * (out[0]["meta_info"]["prompt_tokens"] - 1)
    bad = text_server.post("/generate", {"text": ["a", "b"], "sampling_params": {"n": 2}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "sampling_params.n"

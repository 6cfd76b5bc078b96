"""What real clients send: batched completions (the official client, LangChain-style plain
HTTP), echo with prompt logprobs, JetStream's HTTP mirror, vLLM/llama.cpp's small endpoints,
and bad input (lone surrogates, engine faults) as 4xx / logged 500s."""

import json
import logging

import httpx
import openai
import pytest

from tenor.engine.mock_engine import MockEngine
from tests.server.http.live import LiveServer, asgi_client

CHAT = {"messages": [{"role": "user", "content": "abc"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def server():
    with LiveServer(MockEngine(model_name="smol")) as live:
        yield live


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=10)


def test_three_prompts_times_two_samples_are_indexed_as_openai_does(client):
    completion = client.completions.create(model="smol", prompt=["abc", "xy", "k"], max_tokens=2, n=2)
    by_index = {choice.index: choice.text for choice in completion.choices}
    # index = prompt_i * n + sample_j; sample j starts one byte further on in the mock.
    assert by_index == {0: "de", 1: "ef", 2: "z{", 3: "{|", 4: "lm", 5: "mn"}
    assert completion.usage.prompt_tokens == 6 and completion.usage.completion_tokens == 12


def test_echo_with_logprobs(client):
    completion = client.completions.create(model="smol", prompt="abc", max_tokens=2, echo=True, logprobs=1)
    choice = completion.choices[0]
    assert choice.text == "abcde"
    assert choice.logprobs.tokens == ["a", "b", "c", "d", "e"]
    assert choice.logprobs.token_logprobs == [None, -0.25, -0.25, -0.5, -0.5]  # prompt tokens scored, as vLLM does
    assert choice.logprobs.text_offset == [0, 1, 2, 3, 4]
    plain = client.completions.create(model="smol", prompt=[[100, 101]], max_tokens=1, echo=True)
    assert plain.choices[0].text == "abc"


def test_batched_stream_carries_every_index(client):
    stream = client.completions.create(
        model="smol", prompt=["abc", "xy"], max_tokens=3, n=2, stream=True, stream_options={"include_usage": True}
    )
    texts: dict[int, str] = {}
    chunks = list(stream)
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert texts == {0: "def", 1: "efg", 2: "z{|", 3: "{|}"}
    assert chunks[-1].usage.completion_tokens == 12


def test_langchain_style_batch_over_plain_http(server):
    """LangChain's OpenAI(...).batch() sends one completions request holding every prompt."""
    body = {
        "model": "smol",
        "prompt": ["Tell me a joke", "Hi"],
        "max_tokens": 3,
        "temperature": 0.7,
        "top_p": 1,
        "n": 1,
        "logit_bias": {},
        "frequency_penalty": 0,
        "presence_penalty": 0,
    }
    response = httpx.post(server.url + "/v1/completions", json=body, timeout=10)
    assert response.status_code == 200, response.text
    choices = sorted(response.json()["choices"], key=lambda c: c["index"])
    assert [c["index"] for c in choices] == [0, 1] and [c["text"] for c in choices] == ["fgh", "jkl"]


def test_jetstream_http_mirror(server):
    health = httpx.get(server.url + "/v1/health")
    assert health.json() == {"is_live": "True"}
    response = httpx.post(server.url + "/v1/generate", json={"max_tokens": 3, "text_content": {"text": "abc"}})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    messages = _json_stream(response.text)
    assert "".join(s["text"] for m in messages for s in m["streamContent"]["samples"]) == "def"
    ids = httpx.post(server.url + "/v1/generate", json={"max_tokens": 2, "token_content": {"token_ids": [100, 101]}})
    samples = [s for m in _json_stream(ids.text) for s in m["streamContent"]["samples"]]
    assert [t for s in samples for t in s["tokenIds"]] == [102, 103] and not any(s.get("text") for s in samples)
    bad = httpx.post(server.url + "/v1/generate", json={"max_tokens": 3})
    assert bad.status_code == 400 and "text_content" in bad.json()["error"]["message"]


def _json_stream(text: str) -> list[dict]:
    """Concatenated JSON objects, as JetStream's server writes them."""
    decoder, messages, at = json.JSONDecoder(), [], 0
    while at < len(text):
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            break
        message, at = decoder.raw_decode(text, at)
        messages.append(message)
    return messages


def test_health_version_tokenize_detokenize(server):
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/version").json()["version"]
    tokens = httpx.post(server.url + "/tokenize", json={"prompt": "hé"}).json()
    assert tokens == {"tokens": [107, 198, 172], "count": 3, "max_model_len": 512}
    assert httpx.post(server.url + "/tokenize", json={"content": "hé"}).json()["tokens"] == [107, 198, 172]
    chat = httpx.post(server.url + "/tokenize", json={"messages": [{"role": "user", "content": "x"}]}).json()
    assert chat["count"] == len("user: x\nassistant:")
    text = httpx.post(server.url + "/detokenize", json={"tokens": [107, 198, 172]}).json()
    assert text == {"prompt": "hé", "content": "hé"}
    assert httpx.post(server.url + "/detokenize", json={"tokens": [999]}).status_code == 400
    assert httpx.post(server.url + "/tokenize", json={}).status_code == 400


ENDPOINTS = [
    ("/generate", '{"prompt": "\\ud800x", "max_tokens": 2}', "prompt"),
    ("/v1/completions", '{"prompt": "\\ud800x", "max_tokens": 2}', "prompt"),
    ("/v1/completions", '{"prompt": ["ok", "\\udc00"], "max_tokens": 2}', "prompt"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud800x"}]}', "messages[0].content"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "a"}], "stop": "\\ud800"}', "stop"),
    ("/v1/generate", '{"text_content": {"text": "\\ud800x"}}', "text_content.text"),
    ("/tokenize", '{"prompt": "\\ud800x"}', "prompt"),
]


@pytest.mark.parametrize("path, raw, field", ENDPOINTS)
def test_lone_surrogates_are_400_naming_the_field(server, path, raw, field):
    response = httpx.post(server.url + path, content=raw.encode(), headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert f"'{field}'" in error["message"] and "surrogate" in error["message"]
    assert httpx.post(server.url + "/v1/chat/completions", json=CHAT).status_code == 200  # still serving


class BrokenEngine(MockEngine):
    def generate(self, request):
        raise ZeroDivisionError("a bug in the engine")


@pytest.mark.anyio
async def test_every_500_is_logged_with_its_traceback(caplog):
    caplog.set_level(logging.ERROR)
    async with asgi_client(BrokenEngine()) as (client, _):
        response = await client.post("/v1/completions", json={"prompt": "abc"})
        chat = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 500 and chat.status_code == 500
    assert response.json()["error"] == {
        "message": "internal server error",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[0] is ZeroDivisionError]
    assert len(logged) == 2 and "/v1/completions" in logged[0].getMessage()


@pytest.mark.anyio
async def test_a_tokenized_config_reads_and_writes_ids_over_http():
    async with asgi_client(tokenized=True) as (client, _):
        seed = await client.post("/generate", json={"prompt": "100,101", "max_tokens": 3})
        completion = await client.post("/v1/completions", json={"prompt": "100, 101", "max_tokens": 2})
        text = await client.post("/generate", json={"prompt": "hello", "max_tokens": 3})
        chat = await client.post("/v1/chat/completions", json=CHAT)
    assert seed.json() == {"response": "102,103,104"}
    assert completion.json()["choices"][0]["text"] == "102,103"
    assert text.status_code == 400 and "this model reads token ids" in text.json()["error"]["message"]
    assert chat.status_code == 400 and "no chat template" in chat.json()["error"]["message"]


def test_echo_with_zero_max_tokens_only_scores_the_prompts(client, server):
    """lm-eval-harness' loglikelihood requests: echo, max_tokens 0, logprobs."""
    completion = client.completions.create(model="smol", prompt=["abc", "xy"], max_tokens=0, echo=True, logprobs=0)
    assert [(c.index, c.text) for c in completion.choices] == [(0, "abc"), (1, "xy")]
    assert completion.choices[0].logprobs.token_logprobs == [None, -0.25, -0.25]
    assert completion.usage.completion_tokens == 0 and completion.usage.prompt_tokens == 5
    stream = httpx.post(
        server.url + "/v1/completions", json={"prompt": "abc", "max_tokens": 0, "echo": True, "stream": True}
    )
    assert stream.text.endswith("data: [DONE]\n\n") and '"text":"abc"' in stream.text
    refused = httpx.post(server.url + "/v1/completions", json={"prompt": "abc", "max_tokens": 0})
    assert refused.status_code == 400

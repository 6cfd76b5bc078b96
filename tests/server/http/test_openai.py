"""/v1/* at the JSON level (the official client is exercised in test_openai_client.py)."""

import json

import pytest

from tenor.engine.api import EngineLimits
from tenor.engine.mock_engine import MockEngine
from tests.server.http.live import asgi_client

pytestmark = pytest.mark.anyio

CHAT = {"model": "mock", "messages": [{"role": "user", "content": "abc"}]}


def sse_events(text: str) -> list[str]:
    assert text.endswith("data: [DONE]\n\n")
    events = [block for block in text.split("\n\n") if block]
    assert all(event.startswith("data: ") for event in events)
    return [event[len("data: ") :] for event in events]


async def test_models_lists_the_served_name():
    async with asgi_client(served_model_name="smol") as (client, _):
        listed = await client.get("/v1/models")
        one = await client.get("/v1/models/smol")
        other = await client.get("/v1/models/llama")
    assert listed.json()["object"] == "list"
    assert [card["id"] for card in listed.json()["data"]] == ["smol"]
    assert listed.json()["data"][0]["max_model_len"] == 512
    assert one.json()["id"] == "smol"
    assert other.status_code == 404


async def test_completion_shape_usage_and_id():
    async with asgi_client() as (client, _):
        response = await client.post("/v1/completions", json={"model": "mock", "prompt": "abc", "max_tokens": 4})
    body = response.json()
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion" and body["model"] == "mock"
    assert body["choices"] == [{"index": 0, "text": "defg", "logprobs": None, "finish_reason": "length"}]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


@pytest.mark.parametrize("prompt", ["abc", ["abc"], [100, 101, 102], [[100, 101, 102]]])
async def test_completion_prompt_forms(prompt):
    async with asgi_client() as (client, _):
        response = await client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2})
    assert response.json()["choices"][0]["text"] == "de"  # ids 100..102 are the bytes of "abc"


async def test_completion_n_and_logprobs():
    async with asgi_client() as (client, _):
        response = await client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 3, "n": 2, "logprobs": 1})
    choices = response.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    assert choices[0]["text"] != choices[1]["text"]
    logprobs = choices[0]["logprobs"]
    assert logprobs["tokens"] == ["d", "e", "f"]
    assert logprobs["token_logprobs"] == [-0.5, -0.5, -0.5]
    assert logprobs["top_logprobs"] == [{"d": -0.5}, {"e": -0.5}, {"f": -0.5}]
    assert logprobs["text_offset"] == [0, 1, 2]
    assert response.json()["usage"]["completion_tokens"] == 6


async def test_completion_stream_with_usage_then_done():
    body = {"prompt": "abc", "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    async with asgi_client() as (client, _):
        response = await client.post("/v1/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == "def"
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    assert len({c["id"] for c in chunks}) == 1


async def test_stream_without_include_usage_has_no_usage_chunk():
    async with asgi_client() as (client, _):
        response = await client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 2, "stream": True})
    chunks = [json.loads(event) for event in sse_events(response.text)[:-1]]
    assert all(chunk["choices"] and chunk["usage"] is None for chunk in chunks)


async def test_chat_completion_applies_the_template_without_extra_special_tokens():
    seen = []

    class Recording(MockEngine):
        def generate(self, request):
            seen.append(request)
            return super().generate(request)

    async with asgi_client(Recording()) as (client, engine):
        response = await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 2})
    body = response.json()
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["message"]["content"] == ";<"  # the template ends in "assistant:"
    expected = engine.tokenizer.encode("user: abc\nassistant:", add_special_tokens=False)
    assert seen[0].prompt_token_ids == tuple(expected)
    assert body["usage"]["prompt_tokens"] == len(expected)


async def test_chat_max_tokens_defaults_to_the_context_left():
    seen = []

    class Recording(MockEngine):
        def generate(self, request):
            seen.append(request)
            return super().generate(request)

    limits = EngineLimits(max_prefill_predict_length=64, max_target_length=80)
    async with asgi_client(Recording(limits=limits)) as (client, _):
        await client.post("/v1/chat/completions", json=CHAT)
        await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3, "max_completion_tokens": 5})
    assert seen[0].sampling.max_tokens == 80 - len(seen[0].prompt_token_ids)
    assert seen[1].sampling.max_tokens == 5


async def test_chat_content_parts_and_logprobs():
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "bc"}]}]
    body = {"messages": messages, "max_tokens": 2, "logprobs": True, "top_logprobs": 0}
    async with asgi_client() as (client, _):
        response = await client.post("/v1/chat/completions", json=body)
    content = response.json()["choices"][0]["logprobs"]["content"]
    assert [entry["token"] for entry in content] == [";", "<"]
    assert content[0] == {"token": ";", "logprob": -0.5, "bytes": [59], "top_logprobs": []}


async def test_chat_stream_role_first_then_content_then_usage():
    body = {**CHAT, "max_tokens": 2, "n": 2, "stream": True, "stream_options": {"include_usage": True}}
    async with asgi_client() as (client, _):
        response = await client.post("/v1/chat/completions", json=body)
    chunks = [json.loads(event) for event in sse_events(response.text)[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [{"role": "assistant", "content": ""}] * 2
    texts = {0: "", 1: ""}
    for chunk in chunks[2:-1]:
        (choice,) = chunk["choices"]
        texts[choice["index"]] += choice["delta"]["content"]
    assert texts == {0: ";<", 1: "<="}
    assert chunks[-1]["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize(
    "path, body, status, code, fragment",
    [
        ("/v1/completions", {"model": "gpt-4", "prompt": "abc"}, 404, "model_not_found", "gpt-4"),
        ("/v1/completions", {"prompt": "abc", "max_tokens": -1}, 400, "invalid_value", "max_tokens"),
        ("/v1/completions", {"prompt": "abc", "temperature": -1}, 400, "invalid_value", "temperature"),
        ("/v1/completions", {"prompt": "abc", "temperature": "hot"}, 400, "invalid_value", "'temperature'"),
        ("/v1/completions", {"prompt": "abc", "n": 17}, 400, "invalid_value", "n must be between 1 and 16"),
        ("/v1/completions", {"prompt": "abc", "logprobs": 21}, 400, "invalid_value", "logprobs"),
        ("/v1/completions", {"prompt": "a" * 257}, 400, "invalid_value", "your prompt has 257 tokens"),
        ("/v1/completions", {"prompt": "abc", "max_tokens": 600}, 400, "invalid_value", "600 > 512 - 3"),
        ("/v1/completions", {"prompt": []}, 400, "invalid_value", "must not be empty"),
        ("/v1/completions", {"prompt": ["a"] * 65}, 400, "invalid_value", "at most 64 prompts"),
        ("/v1/completions", {"prompt": ["a", "b" * 300]}, 400, "invalid_value", "your prompt has 300 tokens"),
        ("/v1/completions", {"prompt": [1, -2]}, 400, "invalid_value", "token id -2 is out of range"),
        ("/v1/completions", {"prompt": [[1, 259]]}, 400, "invalid_value", "token id 259 is out of range"),
        ("/v1/completions", {"prompt": "abc", "stop": ["x"] * 17}, 400, "invalid_value", "at most 16"),
        ("/v1/completions", {"prompt": "abc", "presence_penalty": 1.0}, 400, "unsupported_parameter", "presence"),
        (
            "/v1/completions",
            {"prompt": "abc", "stream_options": {"include_usage": True}},
            400,
            "invalid_value",
            "stream_options",
        ),
        (
            "/v1/chat/completions",
            {"model": "x", **{k: v for k, v in CHAT.items() if k != "model"}},
            404,
            "model_not_found",
            "`x`",
        ),
        ("/v1/chat/completions", {"messages": []}, 400, "invalid_value", "messages"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "robot", "content": "x"}]},
            400,
            "invalid_value",
            "messages[0].role",
        ),
        ("/v1/chat/completions", {**CHAT, "top_logprobs": 2}, 400, "invalid_value", "requires 'logprobs'"),
        ("/v1/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 21}, 400, "invalid_value", "between 0"),
        ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function"}]}, 400, "unsupported_parameter", "tools"),
        ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 0}, 400, "invalid_value", "max_tokens"),
    ],
)
async def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(path, body, status, code, fragment):
    async with asgi_client() as (client, _):
        bad = await client.post(path, json=body)
        good = await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 1})
    assert bad.status_code == status, bad.text
    error = bad.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"]
    assert good.status_code == 200


async def test_a_chat_template_that_refuses_the_messages_is_a_400():
    class Picky(MockEngine):
        def __init__(self):
            super().__init__()
            self.tokenizer.apply_chat_template = self._refuse  # type: ignore[method-assign]

        @staticmethod
        def _refuse(messages, add_generation_prompt=True):
            raise ValueError("Conversation roles must alternate user/assistant")

    async with asgi_client(Picky()) as (client, _):
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 400
    assert "roles must alternate" in response.json()["error"]["message"]

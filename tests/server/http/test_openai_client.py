"""The official `openai` client against a real uvicorn server: the shapes must parse."""

import openai
import pytest

from tenor.engine.mock_engine import MockEngine
from tests.server.http.live import LiveServer

KEY = "test-key"


@pytest.fixture(scope="module")
def client():
    with LiveServer(MockEngine(model_name="smol"), api_key=KEY) as server:
        yield openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=10)


def test_models(client):
    assert [model.id for model in client.models.list()] == ["smol"]
    assert client.models.retrieve("smol").id == "smol"


def test_completion_with_n_and_logprobs(client):
    completion = client.completions.create(model="smol", prompt="abc", max_tokens=3, n=2, logprobs=2)
    assert completion.id.startswith("cmpl-")
    assert [choice.text for choice in completion.choices] == ["def", "efg"]
    assert {choice.finish_reason for choice in completion.choices} == {"length"}
    assert completion.choices[0].logprobs.tokens == ["d", "e", "f"]
    assert completion.choices[0].logprobs.token_logprobs == [-0.5] * 3
    assert completion.usage.prompt_tokens == 3 and completion.usage.completion_tokens == 6


def test_completion_stream_with_usage(client):
    stream = client.completions.create(
        model="smol", prompt="abc", max_tokens=4, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(chunk.choices[0].text for chunk in chunks if chunk.choices) == "defg"
    assert chunks[-1].usage.completion_tokens == 4


def test_chat(client):
    completion = client.chat.completions.create(
        model="smol",
        messages=[{"role": "user", "content": "abc"}],
        max_tokens=2,
        n=2,
        logprobs=True,
        top_logprobs=1,
    )
    assert completion.id.startswith("chatcmpl-")
    assert [choice.message.content for choice in completion.choices] == [";<", "<="]
    assert completion.choices[0].message.role == "assistant"
    assert [entry.logprob for entry in completion.choices[0].logprobs.content] == [-0.5, -0.5]
    assert completion.usage.completion_tokens == 4


def test_chat_stream(client):
    stream = client.chat.completions.create(
        model="smol",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_completion_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert len(text) == 3
    finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert finish == ["length"]
    assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + 3


def test_errors_surface_as_the_clients_exceptions(client):
    with pytest.raises(openai.NotFoundError) as not_found:
        client.completions.create(model="gpt-4", prompt="abc")
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="smol", prompt="a" * 300)
    assert "your prompt has 300 tokens" in bad.value.message
    assert client.completions.create(model="smol", prompt="abc", max_tokens=1).choices[0].text == "d"


def test_a_wrong_key_is_refused(client):
    wrong = client.with_options(api_key="nope")
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()

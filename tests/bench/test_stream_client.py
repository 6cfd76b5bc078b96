import asyncio

import httpx
import pytest

from tenor.bench.stream_client import RequestParams, build_payload, fetch_model_name, stream_request
from tenor.errors import UserError
from tests.bench.fake_sse_server import CHUNKS, FIRST_DELAY_S
from tests.fakes.cell import free_port


def _send(url: str, model: str, endpoint: str = "completions", timeout_s: float = 10.0, max_tokens: int = 16):
    async def go():
        body = build_payload(RequestParams(model, endpoint, max_tokens), "hello there")
        path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
        async with httpx.AsyncClient() as client:
            return await stream_request(client, url + path, body, endpoint, timeout_s)

    return asyncio.run(go())


def test_the_payload_is_greedy_streamed_and_asks_for_usage():
    body = build_payload(RequestParams("m", "completions", 128), "hi")
    assert body == {
        "model": "m",
        "max_tokens": 128,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "prompt": "hi",
    }
    chat = build_payload(RequestParams("m", "chat", 8, ignore_eos=True), "hi")
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and chat["ignore_eos"] is True
    assert "prompt" not in chat


def test_tokens_come_from_the_usage_chunk_when_there_is_one(fake_server_url):
    record = _send(fake_server_url, "fake")
    assert record.ok, record.error
    assert record.output_tokens == 2 * CHUNKS and record.token_source == "usage"
    assert record.prompt_tokens == 7
    assert len(record.chunk_gaps_s) == CHUNKS - 1
    assert record.ttft_s is not None and record.ttft_s >= FIRST_DELAY_S
    assert record.latency_s >= record.ttft_s


def test_tokens_are_counted_from_chunks_without_usage(fake_server_url):
    record = _send(fake_server_url, "fake-no-usage")
    assert record.ok and record.output_tokens == CHUNKS and record.token_source == "chunks"
    assert record.prompt_tokens is None


def test_the_chat_role_chunk_is_not_the_first_token(fake_server_url):
    record = _send(fake_server_url, "fake-no-usage", endpoint="chat")
    assert record.ok and record.output_tokens == CHUNKS
    assert record.ttft_s >= FIRST_DELAY_S  # the role chunk came at once; the first text later


def test_http_errors_carry_the_servers_message(fake_server_url):
    record = _send(fake_server_url, "fake-bad")
    assert not record.ok and record.error == "HTTP 400: max_tokens is too large"


def test_an_error_event_mid_stream_fails_the_request(fake_server_url):
    record = _send(fake_server_url, "fake-midway")
    assert not record.ok and record.error == "error in stream: engine fell over"


def test_a_silent_server_times_out_instead_of_hanging(fake_server_url):
    record = _send(fake_server_url, "fake-hang", timeout_s=0.5)
    assert not record.ok and record.error == "timeout after 0.5 s"
    assert 0.5 <= record.latency_s < 5


def test_a_refused_connection_is_an_error_not_an_exception():
    record = _send(f"http://127.0.0.1:{free_port()}", "fake")  # nothing listens there
    assert not record.ok and "ConnectError" in record.error


def test_the_model_name_comes_from_v1_models(fake_server_url):
    async def go(url):
        async with httpx.AsyncClient() as client:
            return await fetch_model_name(client, url)

    assert asyncio.run(go(fake_server_url)) == "fake"
    with pytest.raises(UserError, match="answered HTTP 404"):
        asyncio.run(go(fake_server_url + "/nothing-here"))

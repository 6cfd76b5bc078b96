import json

import pytest

from tenor.engine.api import FinishReason, OverloadedError, RequestOutput, SampleDelta
from tenor.engine.mock_engine import MockEngine
from tenor.server.http.app import MAX_BODY_BYTES
from tests.server.http.live import asgi_client

pytestmark = pytest.mark.anyio

CHAT = {"messages": [{"role": "user", "content": "abc"}], "max_tokens": 2}
PATHS = {
    "/generate": {"prompt": "abc", "max_tokens": 2},
    "/v1/completions": {"prompt": "abc", "max_tokens": 2},
    "/v1/chat/completions": CHAT,
}


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    return error


@pytest.mark.parametrize("path", list(PATHS))
async def test_malformed_json_is_a_400_then_a_good_request_works(path):
    async with asgi_client() as (client, _):
        bad = await client.post(path, content=b'{"prompt": "abc",', headers={"content-type": "application/json"})
        good = await client.post(path, json=PATHS[path])
    assert "not valid JSON" in assert_error(bad, 400, "invalid_json")["message"]
    assert good.status_code == 200


async def test_a_body_that_is_not_an_object_or_not_json_typed_is_a_400():
    async with asgi_client() as (client, _):
        array = await client.post("/v1/completions", json=[1, 2])
        untyped = await client.post("/generate", content=b'{"prompt": "abc"}')  # no Content-Type
    assert_error(array, 400, "invalid_value")
    assert "Content-Type: application/json" in assert_error(untyped, 400, "invalid_json")["message"]


async def test_wrong_types_name_the_field_instead_of_a_422():
    async with asgi_client() as (client, _):
        response = await client.post("/v1/completions", json={"prompt": "abc", "n": "2"})
        nan = await client.post(
            "/v1/completions", content=b'{"prompt": "abc", "top_p": NaN}', headers={"content-type": "application/json"}
        )
    error = assert_error(response, 400, "invalid_value")
    assert error["param"] == "n" and "'n'" in error["message"]
    assert assert_error(nan, 400, "invalid_value")["param"] == "top_p"


async def test_overloaded_engine_is_a_429_with_retry_after():
    class Full(MockEngine):
        def generate(self, request):
            raise OverloadedError("the waiting queue is full (8 requests)", retry_after_s=2.5)

    async with asgi_client(Full()) as (client, _):
        for path, body in PATHS.items():
            response = await client.post(path, json=body)
            assert "queue is full" in assert_error(response, 429, "overloaded")["message"]
            assert response.json()["error"]["type"] == "rate_limit_error"
            assert response.headers["retry-after"] == "3"


async def test_a_full_waiting_queue_of_the_mock_is_a_429():
    async with asgi_client(MockEngine(max_waiting=0)) as (client, _):
        response = await client.post("/v1/completions", json={"prompt": "abc"})
    assert_error(response, 429, "overloaded")
    assert int(response.headers["retry-after"]) >= 1


async def test_an_engine_that_is_not_running_is_a_503():
    async with asgi_client(start=False) as (client, _):
        for path, body in PATHS.items():
            response = await client.post(path, json=body)
            assert assert_error(response, 503, "engine_unavailable")["type"] == "server_error"


async def test_unknown_routes_and_methods_use_the_same_shape():
    async with asgi_client() as (client, _):
        assert_error(await client.get("/v1/nothing"), 404, "not_found")
        assert_error(await client.get("/generate"), 405, "method_not_allowed")


async def test_oversized_bodies_are_refused_declared_or_chunked():
    async def chunks():
        yield b'{"prompt": "'
        for _ in range(MAX_BODY_BYTES // 65536 + 1):
            yield b"a" * 65536
        yield b'"}'

    async with asgi_client() as (client, _):
        declared = await client.post("/generate", json={"prompt": "a" * MAX_BODY_BYTES})
        chunked = await client.post("/generate", content=chunks(), headers={"content-type": "application/json"})
        good = await client.post("/generate", json={"prompt": "abc", "max_tokens": 1})
    assert_error(declared, 413, "request_too_large")
    assert_error(chunked, 413, "request_too_large")
    assert good.status_code == 200


class Crashing(MockEngine):
    """Fails after `after` outputs, as a broken engine would."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after

    def generate(self, request):
        outputs = super().generate(request)

        async def failing():
            count = 0
            async for output in outputs:
                if count == self.after:
                    raise RuntimeError("device lost")
                count += 1
                yield output

        return failing()


async def test_an_engine_crash_before_output_is_a_500_without_details():
    async with asgi_client(Crashing(after=0)) as (client, _):
        response = await client.post("/v1/completions", json={"prompt": "abc"})
    error = assert_error(response, 500, "internal_error")
    assert "device lost" not in error["message"]


async def test_an_engine_crash_mid_stream_ends_the_stream_with_an_error_event():
    async with asgi_client(Crashing(after=2)) as (client, _):
        sse = await client.post("/v1/completions", json={"prompt": "abc", "stream": True})
        ndjson = await client.post("/generate", json={"prompt": "abc", "stream": True})
    events = [block[len("data: ") :] for block in sse.text.split("\n\n") if block]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "internal_error"
    lines = [json.loads(line) for line in ndjson.text.splitlines()]
    assert lines[:2] == [{"text": "d"}, {"text": "e"}]
    assert lines[-1]["error"]["code"] == "internal_error"


class AbortingAfterOne(MockEngine):
    """Ends every sample with ABORT after one token, as an engine stopping past its drain does."""

    def generate(self, request):
        outputs = super().generate(request)

        async def aborting():
            async for output in outputs:
                deltas = tuple(
                    SampleDelta(d.index, d.token_ids, d.text, d.cumulative_logprob, d.logprobs, FinishReason.ABORT)
                    for d in output.deltas
                )
                yield RequestOutput(output.request_id, deltas, output.num_prompt_tokens, True)
                return

        return aborting()


async def test_requests_the_engine_aborts_are_503s_or_end_their_stream_with_an_error():
    async with asgi_client(AbortingAfterOne()) as (client, _):
        whole = await client.post("/v1/chat/completions", json=CHAT)
        jetstream = await client.post("/generate", json={"prompt": "abc"})
        sse = await client.post("/v1/completions", json={"prompt": "abc", "stream": True})
        ndjson = await client.post("/generate", json={"prompt": "abc", "stream": True})
    assert_error(whole, 503, "aborted")
    assert_error(jetstream, 503, "aborted")
    events = [block[len("data: ") :] for block in sse.text.split("\n\n") if block]
    assert json.loads(events[-2])["error"]["code"] == "aborted" and events[-1] == "[DONE]"
    lines = [json.loads(line) for line in ndjson.text.splitlines()]
    assert lines == [{"text": "d"}, {"error": lines[-1]["error"]}] and lines[-1]["error"]["code"] == "aborted"


def _readme_error_codes() -> set[str]:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    table = text.split("### Errors", 1)[1].split("\n\n`type`", 1)[0]
    return set(re.findall(r"`([a-z_]+)`", table))


@pytest.mark.parametrize("status", [400, 401, 403, 406, 409, 415, 418, 422, 500, 501, 502])
async def test_every_status_starlette_raises_has_a_documented_code(status):
    from fastapi import HTTPException

    async with asgi_client() as (client, engine):
        app = client._transport.app  # type: ignore[attr-defined]

        @app.get("/raise")
        async def _raise() -> None:
            raise HTTPException(status, "refused")

        response = await client.get("/raise")
    assert response.status_code == status
    assert response.json()["error"]["code"] in _readme_error_codes()

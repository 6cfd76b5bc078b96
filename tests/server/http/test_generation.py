import pytest
from starlette.requests import ClientDisconnect

from tenor.engine.api import GenerateRequest, SamplingParams
from tenor.engine.mock_engine import MockEngine
from tenor.server.http.errors import ApiError
from tenor.server.http.generation import Generation, GenerationStream
from tenor.server.metrics import ServerMetrics
from tenor.server.pipeline import RequestPipeline

pytestmark = pytest.mark.anyio


def request(max_tokens: int = 3, n: int = 1, request_id: str = "r1") -> GenerateRequest:
    return GenerateRequest(request_id, (100, 101, 102), SamplingParams(max_tokens=max_tokens, n=n, logprobs=0))


async def started_engine(**kwargs) -> MockEngine:
    engine = MockEngine(**kwargs)
    await engine.start()
    return engine


async def test_collect_accumulates_every_sample():
    engine = await started_engine()
    generation = await Generation.start(RequestPipeline(engine), request(n=2), ServerMetrics(engine).start_request())
    result = await generation.collect()
    assert [(s.text, len(s.token_ids), len(s.logprobs), s.finish_reason.value) for s in result.samples] == [
        ("def", 3, 3, "length"),
        ("efg", 3, 3, "length"),
    ]
    assert (result.num_prompt_tokens, result.num_generated_tokens) == (3, 6)
    assert engine.aborted == []


async def test_engine_refusals_become_api_errors():
    engine = await started_engine(max_waiting=0)
    with pytest.raises(ApiError) as refused:
        await Generation.start(RequestPipeline(engine), request(), ServerMetrics(engine).start_request())
    assert refused.value.status == 429


async def test_an_engine_that_yields_nothing_is_a_500():
    class Silent(MockEngine):
        def generate(self, request):
            async def nothing():
                return
                yield

            return nothing()

    engine = Silent()
    await engine.start()
    with pytest.raises(ApiError) as failed:
        await Generation.start(RequestPipeline(engine), request(), ServerMetrics(engine).start_request())
    assert failed.value.status == 500


async def test_leaving_the_loop_early_aborts_the_request():
    engine = await started_engine()
    generation = await Generation.start(
        RequestPipeline(engine), request(max_tokens=50), ServerMetrics(engine).start_request()
    )
    outputs = generation.outputs()
    await outputs.__anext__()
    await outputs.aclose()
    assert engine.aborted == ["r1"]
    assert engine.stats().num_running == 0


async def test_a_stream_whose_connection_fails_before_the_body_still_aborts():
    engine = await started_engine()
    generation = await Generation.start(
        RequestPipeline(engine), request(max_tokens=50), ServerMetrics(engine).start_request()
    )

    async def body():
        async for output in generation.outputs():
            yield output.deltas[0].text

    async def receive():
        return {"type": "http.disconnect"}

    async def broken_send(message):
        raise OSError("connection reset")

    response = GenerationStream(generation, body(), "text/plain", {})
    with pytest.raises(ClientDisconnect):
        await response({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, broken_send)
    assert engine.aborted == ["r1"]

"""The gRPC LM service on a real in-process gRPC server over MockEngine.

MockEngine continues a prompt byte by byte ("abc" -> "defg"), every generated token has
logprob -0.5 and every scored token -0.25, so the expected answers are hand-computed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

import grpc
import pytest

from tenor.engine.mock_engine import MockEngine
from tenor.proto import lm_pb2, lm_pb2_grpc
from tenor.server.lm_service import LMService, sampling_from_extra
from tests.server.lm_servers import FakeModels

MODEL = "/tenor/test/lm"


@contextlib.asynccontextmanager
async def lm_stub(models: FakeModels) -> AsyncIterator[lm_pb2_grpc.LMServiceStub]:
    server = grpc.aio.server()
    lm_pb2_grpc.add_LMServiceServicer_to_server(LMService(models), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield lm_pb2_grpc.LMServiceStub(channel)
    finally:
        await server.stop(0)


def run(coro) -> object:
    return asyncio.run(coro)


async def started(**kwargs) -> MockEngine:
    engine = MockEngine(**kwargs)
    await engine.start()
    return engine


def extra(**items: float) -> lm_pb2.ExtraInputs:
    return lm_pb2.ExtraInputs(items=items)


def test_generate_returns_text_and_score():
    async def body():
        models = FakeModels({MODEL: await started()})
        async with lm_stub(models) as stub:
            reply = await stub.Generate(
                lm_pb2.GenerateRequest(model_key=MODEL, text="abc", extra_inputs=extra(per_example_max_decode_steps=4))
            )
        return reply, models

    reply, models = run(body())
    assert [(t.text, t.score) for t in reply.texts] == [("defg", -2.0)]
    assert len(models.latencies) == 1 and models.latencies[0] > 0


def test_generate_several_samples_sorted_by_score():
    async def body():
        async with lm_stub(FakeModels({MODEL: await started()})) as stub:
            return await stub.Generate(
                lm_pb2.GenerateRequest(
                    model_key=MODEL, text="a", extra_inputs=extra(num_samples=3, per_example_max_decode_steps=2)
                )
            )

    reply = run(body())
    # Sample i starts shifted by i: "bc", "cd", "de"; equal scores keep sample order.
    assert [t.text for t in reply.texts] == ["bc", "cd", "de"]
    assert [t.score for t in reply.texts] == [-1.0, -1.0, -1.0]


def test_stream_accumulates_with_prefix_len_to_the_generate_answer():
    async def body():
        async with lm_stub(FakeModels({MODEL: await started()})) as stub:
            request = lm_pb2.GenerateRequest(
                model_key=MODEL, text="abc", extra_inputs=extra(num_samples=2, per_example_max_decode_steps=3)
            )
            return [msg async for msg in stub.GenerateStream(request)]

    messages = run(body())
    assert len(messages) == 3
    acc = ["", ""]
    for message in messages:
        assert len(message.items) == 2
        for i, item in enumerate(message.items):
            acc[i] = acc[i][: item.prefix_len] + item.text
    assert acc == ["def", "efg"]
    assert [list(item.scores) for item in messages[-1].items] == [[-1.5], [-1.5]]


def test_score_each_suffix():
    async def body():
        async with lm_stub(FakeModels({MODEL: await started()})) as stub:
            return await stub.Score(lm_pb2.ScoreRequest(model_key=MODEL, prefix="ab", suffix=["c", "de"]))

    assert list(run(body()).logp) == [-0.25, -0.5]


@pytest.mark.parametrize(
    "request_, code, words",
    [
        (lm_pb2.GenerateRequest(model_key="/tenor/test/nope", text="a"), grpc.StatusCode.NOT_FOUND, "not served"),
        (
            lm_pb2.GenerateRequest(model_key=MODEL, text="a", extra_inputs=extra(tempreature=1)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "tempreature",
        ),
        (
            lm_pb2.GenerateRequest(
                model_key=MODEL, text="a", extra_inputs=lm_pb2.ExtraInputs(strings={"temperature": "hot"})
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "temperature",
        ),
        (
            lm_pb2.GenerateRequest(model_key=MODEL, text="a", extra_inputs=extra(seed=1.5)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "whole number",
        ),
        (
            lm_pb2.GenerateRequest(model_key=MODEL, text="a", extra_inputs=extra(num_samples=17)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "n must be",
        ),
        (
            lm_pb2.GenerateRequest(model_key=MODEL, text="a", extra_inputs=extra(per_example_top_p=0)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "top_p",
        ),
        (lm_pb2.GenerateRequest(model_key=MODEL, text=""), grpc.StatusCode.INVALID_ARGUMENT, "empty"),
        (lm_pb2.GenerateRequest(model_key=MODEL, text="a" * 300), grpc.StatusCode.INVALID_ARGUMENT, "maximum prompt"),
    ],
)
def test_bad_generate_requests_get_a_clear_status_and_the_server_keeps_serving(request_, code, words):
    async def body():
        async with lm_stub(FakeModels({MODEL: await started()})) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.Generate(request_)
            good = await stub.Generate(lm_pb2.GenerateRequest(model_key=MODEL, text="abc"))
            return failed.value, good

    error, good = run(body())
    assert error.code() == code
    assert words in error.details() and "\n" not in error.details()
    assert good.texts[0].text


def test_bad_stream_request_fails_before_the_first_message():
    async def body():
        async with lm_stub(FakeModels({MODEL: await started()})) as stub:
            call = stub.GenerateStream(lm_pb2.GenerateRequest(model_key=MODEL, text="a", extra_inputs=extra(bogus=1)))
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                async for _ in call:
                    pass
            return failed.value

    assert run(body()).code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "request_, words",
    [
        (lm_pb2.ScoreRequest(model_key=MODEL, prefix="ab"), "at least one suffix"),
        (lm_pb2.ScoreRequest(model_key=MODEL, prefix="ab", suffix=["c", ""]), "empty"),
        (
            lm_pb2.ScoreRequest(model_key=MODEL, prefix="ab", suffix=["c"], extra_inputs=extra(temperature=1)),
            "Score takes none",
        ),
        (lm_pb2.ScoreRequest(model_key=MODEL, prefix="a" * 600, suffix=["c"]), "scores at most 256"),
    ],
)
def test_bad_score_requests_are_invalid_argument(request_, words):
    async def body():
        async with lm_stub(FakeModels({MODEL: await started()})) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.Score(request_)
            return failed.value

    error = run(body())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in error.details()


def test_full_queue_is_resource_exhausted():
    async def body():
        async with lm_stub(FakeModels({MODEL: await started(max_waiting=0)})) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.Generate(lm_pb2.GenerateRequest(model_key=MODEL, text="abc"))
            return failed.value

    assert run(body()).code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_loading_model_is_unavailable():
    async def body():
        async with lm_stub(FakeModels({MODEL: MockEngine()})) as stub:  # never started
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.Generate(lm_pb2.GenerateRequest(model_key=MODEL, text="abc"))
            return failed.value

    error = run(body())
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "loading" in error.details()


def test_cancelled_stream_aborts_the_engine_request():
    async def body():
        engine = await started(step_delay_s=0.01)
        async with lm_stub(FakeModels({MODEL: engine})) as stub:
            call = stub.GenerateStream(
                lm_pb2.GenerateRequest(model_key=MODEL, text="a", extra_inputs=extra(per_example_max_decode_steps=200))
            )
            await call.read()
            call.cancel()
            for _ in range(100):
                if engine.aborted:
                    break
                await asyncio.sleep(0.01)
        return engine

    engine = run(body())
    assert len(engine.aborted) == 1
    assert engine.stats().num_running == 0


def test_tokenized_model_takes_and_returns_comma_separated_ids():
    async def body():
        models = FakeModels({MODEL: await started()}, tokenized=True)
        async with lm_stub(models) as stub:
            extra_steps = extra(per_example_max_decode_steps=3)
            reply = await stub.Generate(
                lm_pb2.GenerateRequest(model_key=MODEL, text="100, 101", extra_inputs=extra_steps)
            )
            request = lm_pb2.GenerateRequest(model_key=MODEL, text="100,101", extra_inputs=extra_steps)
            acc = ""
            async for message in stub.GenerateStream(request):
                acc = acc[: message.items[0].prefix_len] + message.items[0].text
            score = await stub.Score(lm_pb2.ScoreRequest(model_key=MODEL, prefix="100", suffix=["101,102"]))
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.Generate(lm_pb2.GenerateRequest(model_key=MODEL, text="100,abc"))
            return reply, acc, score, failed.value

    reply, acc, score, error = run(body())
    # MockEngine continues each token with the next id: 101 -> 102, 103, 104.
    assert reply.texts[0].text == acc == "102,103,104"
    assert list(score.logp) == [-0.5]
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "item 1" in error.details()


def test_a_tokenized_model_that_accepts_text_answers_each_prompt_in_its_own_form():
    async def body():
        models = FakeModels({MODEL: await started()}, tokenized=True, accepts_text=True)
        async with lm_stub(models) as stub:
            steps = extra(per_example_max_decode_steps=2)
            as_ids = await stub.Generate(lm_pb2.GenerateRequest(model_key=MODEL, text="100,101", extra_inputs=steps))
            as_text = await stub.Generate(lm_pb2.GenerateRequest(model_key=MODEL, text="ab", extra_inputs=steps))
            acc = ""
            async for message in stub.GenerateStream(
                lm_pb2.GenerateRequest(model_key=MODEL, text="ab", extra_inputs=steps)
            ):
                acc = acc[: message.items[0].prefix_len] + message.items[0].text
            return as_ids, as_text, acc

    as_ids, as_text, streamed = run(body())
    assert as_ids.texts[0].text == "102,103"
    assert as_text.texts[0].text == streamed == "cd"  # MockEngine continues "ab" with the next bytes


def test_sampling_from_extra_maps_sax_keys():
    sampling = sampling_from_extra(
        extra(temperature=0.5, per_example_top_k=40, per_example_top_p=0.75, per_example_max_decode_steps=7, seed=3)
    )
    assert (sampling.temperature, sampling.top_k, sampling.top_p, sampling.max_tokens, sampling.seed, sampling.n) == (
        0.5,
        40,
        0.75,
        7,
        3,
        1,
    )
    defaults = sampling_from_extra(lm_pb2.ExtraInputs())
    assert (defaults.temperature, defaults.max_tokens, defaults.seed) == (0.0, 32, None)


class BrokenEngine(MockEngine):
    def generate(self, request):
        raise ZeroDivisionError("a bug in the engine")


def test_an_internal_error_is_internal_and_logged(caplog):
    import logging

    caplog.set_level(logging.ERROR)

    async def body():
        engine = BrokenEngine()
        await engine.start()
        async with lm_stub(FakeModels({MODEL: engine})) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.Generate(lm_pb2.GenerateRequest(model_key=MODEL, text="abc"))
        return failed.value

    error = run(body())
    assert error.code() == grpc.StatusCode.INTERNAL and error.details() == "internal server error"
    assert any(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in caplog.records)


def test_bad_token_ids_of_a_tokenized_model_are_invalid_argument():
    async def body():
        engine = await started()
        codes = []
        async with lm_stub(FakeModels({MODEL: engine}, tokenized=True)) as stub:
            for text in ("1,2,999", "1,x"):
                with pytest.raises(grpc.aio.AioRpcError) as failed:
                    await stub.Generate(lm_pb2.GenerateRequest(model_key=MODEL, text=text))
                codes.append((failed.value.code(), failed.value.details()))
        return codes

    codes = run(body())
    assert codes[0] == (grpc.StatusCode.INVALID_ARGUMENT, "'text' token id 999 is out of range (valid ids: 0 to 258)")
    assert codes[1][0] == grpc.StatusCode.INVALID_ARGUMENT and "'text'" in codes[1][1]

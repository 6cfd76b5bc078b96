"""The gRPC LM service (Generate, GenerateStream, Score) over the Engine contract.

Handlers translate protos into `GenerateRequest`s, relay what the engine yields, and map
engine errors onto status codes a client can act on: RESOURCE_EXHAUSTED and UNAVAILABLE
mean "try another replica", INVALID_ARGUMENT means "your request is wrong", NOT_FOUND
means "this server does not serve that model".
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Protocol

import grpc

from tenor.engine.api import Engine, InvalidRequestError, RequestOutput, SamplingParams
from tenor.proto import lm_pb2, lm_pb2_grpc
from tenor.server.error_table import ModelNotServedError, classify, client_message
from tenor.server.pipeline import RequestPipeline, Samples, TextPrompt

__all__ = ["LMService", "ModelLookup", "ModelNotServedError", "ReadyModel", "sampling_from_extra"]

log = logging.getLogger(__name__)

DEFAULT_MAX_DECODE_STEPS = 32

# SAX's documented LM decode keys, plus seed and num_samples (tenor samples per request).
GENERATE_EXTRA_KEYS = (
    "temperature",
    "per_example_top_k",
    "per_example_top_p",
    "per_example_max_decode_steps",
    "seed",
    "num_samples",
)


@dataclass(frozen=True)
class ReadyModel:
    """A model that can take requests now."""

    engine: Engine
    tokenized: bool  # requests and responses are comma-separated token ids
    record_latency: Callable[[float], None]  # seconds a request took, for status percentiles
    record_failure: Callable[[], None]  # a request that ended with an error
    accepts_text: bool = False  # a tokenized model that also reads text prompts

    @property
    def pipeline(self) -> RequestPipeline:
        return RequestPipeline(self.engine, self.tokenized, self.accepts_text)


class ModelLookup(Protocol):
    def ready(self, model_key: str) -> ReadyModel:
        """Raises ModelNotServedError, or EngineUnavailableError while loading or after a failure."""


def sampling_from_extra(extra: lm_pb2.ExtraInputs) -> SamplingParams:
    """SamplingParams from SAX-style extra inputs; unknown keys are INVALID_ARGUMENT."""
    unknown = sorted(set(extra.items) - set(GENERATE_EXTRA_KEYS)) + sorted(extra.strings)
    if unknown:
        raise InvalidRequestError(
            f"unknown extra input(s) {', '.join(unknown)}; known: {', '.join(GENERATE_EXTRA_KEYS)}"
        )
    items = dict(extra.items)
    for key, value in items.items():
        if not math.isfinite(value):
            raise InvalidRequestError(f"extra input {key} must be a finite number, got {value}")
    seed = items.get("seed")
    return SamplingParams(
        max_tokens=_whole(items, "per_example_max_decode_steps", DEFAULT_MAX_DECODE_STEPS),
        temperature=items.get("temperature", 0.0),
        top_k=_whole(items, "per_example_top_k", 0),
        top_p=items.get("per_example_top_p", 1.0),
        seed=None if seed is None else _whole(items, "seed", 0),
        n=_whole(items, "num_samples", 1),
    )


def _whole(items: dict[str, float], key: str, default: int) -> int:
    value = items.get(key, default)
    if value != int(value):
        raise InvalidRequestError(f"extra input {key} must be a whole number, got {value}")
    return int(value)


class LMService(lm_pb2_grpc.LMServiceServicer):
    def __init__(self, models: ModelLookup) -> None:
        self._models = models

    @contextlib.asynccontextmanager
    async def _serving(self, model_key: str, context: grpc.aio.ServicerContext) -> AsyncIterator[ReadyModel]:
        """The model for one call; records its latency, or its failure and the status code."""
        started = time.monotonic()
        model = None
        try:
            model = self._models.ready(model_key)
            yield model
        except Exception as exc:
            if model is not None:
                model.record_failure()
            await _abort_if_known(context, exc)
            raise
        model.record_latency(time.monotonic() - started)

    async def Generate(
        self, request: lm_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> lm_pb2.GenerateResponse:
        async with self._serving(request.model_key, context) as model:
            pipeline = model.pipeline.for_prompt(TextPrompt(request.text))
            samples = Samples(pipeline, _sampling(request).n)
            async for output in _run(pipeline, request):
                samples.add(output)
        ranked = sorted(samples.results, key=lambda s: s.cumulative_logprob, reverse=True)
        return lm_pb2.GenerateResponse(
            texts=[lm_pb2.DecodedText(text=s.text, score=s.cumulative_logprob) for s in ranked]
        )

    async def GenerateStream(
        self, request: lm_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[lm_pb2.GenerateStreamResponse]:
        async with self._serving(request.model_key, context) as model:
            pipeline = model.pipeline.for_prompt(TextPrompt(request.text))
            samples = Samples(pipeline, _sampling(request).n)
            async for output in _run(pipeline, request):
                yield _stream_response(samples, output)

    async def Score(self, request: lm_pb2.ScoreRequest, context: grpc.aio.ServicerContext) -> lm_pb2.ScoreResponse:
        async with self._serving(request.model_key, context) as model:
            logps = await _score(model.pipeline.for_prompt(TextPrompt(request.prefix)), request)
        return lm_pb2.ScoreResponse(logp=logps)


async def _score(pipeline: RequestPipeline, request: lm_pb2.ScoreRequest) -> list[float]:
    extra = sorted(request.extra_inputs.items) + sorted(request.extra_inputs.strings)
    if extra:
        raise InvalidRequestError(f"unknown extra input(s) {', '.join(extra)}; Score takes none")
    if not request.suffix:
        raise InvalidRequestError("Score needs at least one suffix")
    prefix = pipeline.prompt_ids(TextPrompt(request.prefix, field="prefix"))
    suffixes = [
        pipeline.prompt_ids(TextPrompt(text, add_special_tokens=False, field=f"suffix[{i}]"))
        for i, text in enumerate(request.suffix)
    ]
    if not all(suffixes):
        raise InvalidRequestError("a suffix is empty")
    for suffix in suffixes:
        pipeline.check_score(prefix, suffix)
    return [await pipeline.engine.score(prefix, suffix) for suffix in suffixes]


def _sampling(request: lm_pb2.GenerateRequest) -> SamplingParams:
    return sampling_from_extra(request.extra_inputs)


async def _run(pipeline: RequestPipeline, request: lm_pb2.GenerateRequest) -> AsyncIterator[RequestOutput]:
    prompt_ids = pipeline.prompt_ids(TextPrompt(request.text, field="text"))
    engine_request = pipeline.request("lm", prompt_ids, _sampling(request))
    async for output in pipeline.outputs(engine_request):
        yield output


def _stream_response(samples: Samples, output: RequestOutput) -> lm_pb2.GenerateStreamResponse:
    """One stream message: every sample's new text after what it had (SAX's prefix_len)."""
    prefix_lens = [len(s.text) for s in samples.results]
    new_text = samples.add(output)
    items = [
        lm_pb2.GenerateStreamItem(text=new_text[i], prefix_len=prefix_lens[i], scores=[s.cumulative_logprob])
        for i, s in enumerate(samples.results)
    ]
    return lm_pb2.GenerateStreamResponse(items=items)


async def _abort_if_known(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    """Aborts the call with the status the error table gives `exc`; an internal error is
    logged with its traceback and answered INTERNAL without details."""
    kind = classify(exc)
    if kind.internal:
        log.error("LM service call failed", exc_info=(type(exc), exc, exc.__traceback__))
    await context.abort(kind.grpc_code, client_message(exc))

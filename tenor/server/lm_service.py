"""The gRPC LM service (Generate, GenerateStream, Score) over the Engine contract.

Handlers translate protos into `GenerateRequest`s, relay what the engine yields, and map
engine errors onto status codes a client can act on: RESOURCE_EXHAUSTED and UNAVAILABLE
mean "try another replica", INVALID_ARGUMENT means "your request is wrong", NOT_FOUND
means "this server does not serve that model".
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Protocol

import grpc

from tenor.engine.api import (
    Engine,
    EngineUnavailableError,
    GenerateRequest,
    InvalidRequestError,
    OverloadedError,
    RequestOutput,
    SamplingParams,
)
from tenor.errors import UserError
from tenor.proto import lm_pb2, lm_pb2_grpc
from tenor.tokenizer.token_ids import format_token_ids, parse_token_ids

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


class ModelNotServedError(Exception):
    """This server has no such model (gRPC NOT_FOUND): the caller should ask the admin again."""


@dataclass(frozen=True)
class ReadyModel:
    """A model that can take requests now."""

    engine: Engine
    tokenized: bool  # requests and responses are comma-separated token ids
    record_latency: Callable[[float], None]  # seconds a request took, for status percentiles
    record_failure: Callable[[], None]  # a request that ended with an error


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


class TextCodec:
    """Prompt text to token ids and back, plain or tokenized (comma-separated ids)."""

    def __init__(self, model: ReadyModel) -> None:
        self._tokenizer = model.engine.tokenizer
        self._tokenized = model.tokenized

    def prompt_ids(self, text: str) -> tuple[int, ...]:
        if self._tokenized:
            return tuple(_parse_ids(text))
        return tuple(self._tokenizer.encode(text, add_special_tokens=True))

    def suffix_ids(self, text: str) -> tuple[int, ...]:
        if self._tokenized:
            return tuple(_parse_ids(text))
        return tuple(self._tokenizer.encode(text, add_special_tokens=False))

    def delta_text(self, token_ids: tuple[int, ...], text: str, so_far: str) -> str:
        """What to append to a sample's output for one engine delta."""
        if not self._tokenized:
            return text
        if not token_ids:
            return ""
        return ("," if so_far else "") + format_token_ids(token_ids)


def _parse_ids(text: str) -> list[int]:
    try:
        return list(parse_token_ids(text))
    except (ValueError, UserError) as exc:
        raise InvalidRequestError(str(exc)) from None


@dataclass
class _Sample:
    text: str = ""
    score: float = 0.0


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

    async def Generate(self, request: lm_pb2.GenerateRequest, context: grpc.aio.ServicerContext) -> lm_pb2.GenerateResponse:
        async with self._serving(request.model_key, context) as model:
            codec = TextCodec(model)
            samples: list[_Sample] = []
            async for output in _run(model, codec, request):
                _accumulate(samples, output, codec)
        ranked = sorted(samples, key=lambda s: s.score, reverse=True)
        return lm_pb2.GenerateResponse(texts=[lm_pb2.DecodedText(text=s.text, score=s.score) for s in ranked])

    async def GenerateStream(
        self, request: lm_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[lm_pb2.GenerateStreamResponse]:
        async with self._serving(request.model_key, context) as model:
            codec = TextCodec(model)
            samples: list[_Sample] = []
            async for output in _run(model, codec, request):
                yield _stream_response(samples, output, codec)

    async def Score(self, request: lm_pb2.ScoreRequest, context: grpc.aio.ServicerContext) -> lm_pb2.ScoreResponse:
        async with self._serving(request.model_key, context) as model:
            logps = await _score(model, request)
        return lm_pb2.ScoreResponse(logp=logps)


async def _score(model: ReadyModel, request: lm_pb2.ScoreRequest) -> list[float]:
    extra = sorted(request.extra_inputs.items) + sorted(request.extra_inputs.strings)
    if extra:
        raise InvalidRequestError(f"unknown extra input(s) {', '.join(extra)}; Score takes none")
    if not request.suffix:
        raise InvalidRequestError("Score needs at least one suffix")
    codec = TextCodec(model)
    prefix = codec.prompt_ids(request.prefix)
    suffixes = [codec.suffix_ids(text) for text in request.suffix]
    if not all(suffixes):
        raise InvalidRequestError("a suffix is empty")
    logps = []
    for suffix in suffixes:
        if len(prefix) + len(suffix) > model.engine.limits.max_target_length:
            raise InvalidRequestError(
                f"prefix + suffix is {len(prefix) + len(suffix)} tokens; this model's maximum context "
                f"length is {model.engine.limits.max_target_length} tokens"
            )
        logps.append(await model.engine.score(prefix, suffix))
    return logps


async def _run(model: ReadyModel, codec: TextCodec, request: lm_pb2.GenerateRequest) -> AsyncIterator[RequestOutput]:
    sampling = sampling_from_extra(request.extra_inputs)
    engine_request = GenerateRequest(uuid.uuid4().hex, codec.prompt_ids(request.text), sampling)
    # Closing the engine's iterator (also when the caller cancels) aborts the request
    # and frees its slot at once.
    async with contextlib.aclosing(model.engine.generate(engine_request)) as outputs:
        async for output in outputs:
            yield output


def _stream_response(samples: list[_Sample], output: RequestOutput, codec: TextCodec) -> lm_pb2.GenerateStreamResponse:
    """One stream message: every sample's new text after what it had (SAX's prefix_len)."""
    prefix_lens = [len(s.text) for s in samples]
    new_text = _accumulate(samples, output, codec)
    prefix_lens += [0] * (len(samples) - len(prefix_lens))
    items = [
        lm_pb2.GenerateStreamItem(text=new_text[i], prefix_len=prefix_lens[i], scores=[s.score])
        for i, s in enumerate(samples)
    ]
    return lm_pb2.GenerateStreamResponse(items=items)


def _accumulate(samples: list[_Sample], output: RequestOutput, codec: TextCodec) -> list[str]:
    """Adds an output's deltas to the samples; returns each sample's new text."""
    new_text = [""] * len(samples)
    for delta in output.deltas:
        while len(samples) <= delta.index:
            samples.append(_Sample())
            new_text.append("")
        sample = samples[delta.index]
        piece = codec.delta_text(delta.token_ids, delta.text, sample.text)
        sample.text += piece
        sample.score = delta.cumulative_logprob
        new_text[delta.index] += piece
    return new_text


async def _abort_if_known(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    """Aborts the call with the status that fits `exc`; returns if none fits (an internal error)."""
    code = _code_for(exc)
    if code is not None:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        await context.abort(code, message)


def _code_for(exc: BaseException) -> grpc.StatusCode | None:
    if isinstance(exc, ModelNotServedError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, OverloadedError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(exc, EngineUnavailableError):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(exc, (InvalidRequestError, UserError, ValueError)):
        return grpc.StatusCode.INVALID_ARGUMENT
    return None

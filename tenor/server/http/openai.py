"""OpenAI's HTTP API: /v1/completions, /v1/chat/completions, /v1/models.

Streams are server-sent events: `data: <chunk JSON>\\n\\n` per engine output, then, when
`stream_options.include_usage` is true, one chunk with empty `choices` and the `usage`,
then `data: [DONE]\\n\\n`. A request that fails mid-stream gets `data: {"error": ...}`
before [DONE]. Response shapes are checked against the official `openai` client in tests.
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator, Mapping, Sequence

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel

from tenor.engine.api import FinishReason, GenerateRequest
from tenor.server.http.auth import ApiKeyGuard
from tenor.server.http.context import ServerContext
from tenor.server.http.disconnect import ClientDisconnected, cancel_on_disconnect
from tenor.server.http.errors import bad_request, from_engine_error
from tenor.server.http.formatters import (
    ChatFormatter,
    CompletionFormatter,
    Echo,
    Formatter,
    dumps,
    merge_completions,
)
from tenor.server.http.generation import Generation, GenerationResult, GenerationStream, SampleResult
from tenor.server.http.jetstream import CLIENT_CLOSED, aborted_error
from tenor.server.http.sampling import openai_sampling, reject_unsupported
from tenor.server.http.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    ModelCard,
    ModelList,
    Usage,
)
from tenor.server.metrics import RequestTimer
from tenor.server.pipeline import ChatPrompt, Prompt, TextPrompt, TokenPrompt

MAX_PROMPTS_PER_REQUEST = 64  # a batch of prompts shares one HTTP request, not unbounded

log = logging.getLogger(__name__)

SSE = "text/event-stream"
MAX_CHAT_TOP_LOGPROBS = 20


def build_router(ctx: ServerContext, guard: ApiKeyGuard) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(guard)])

    @router.get("/models")
    async def list_models() -> Response:
        return _json(ModelList(data=[_model_card(ctx)]))

    @router.get("/models/{model_id:path}")
    async def get_model(model_id: str) -> Response:
        ctx.check_model(model_id)
        return _json(_model_card(ctx))

    @router.post("/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        ctx.admit()
        ctx.check_model(body.model)
        reject_unsupported(body)
        _reject_unsupported_completion(body)
        prompts = [ctx.pipeline.prompt_ids(prompt) for prompt in _completion_prompts(body.prompt)]
        max_tokens = 16 if body.max_tokens is None else body.max_tokens
        # echo with max_tokens 0 only scores the prompt (lm-eval-harness' loglikelihood requests).
        score_only = body.echo and max_tokens == 0
        sampling = openai_sampling(body, 1 if score_only else max_tokens, body.logprobs)
        engine_requests = [ctx.new_request("cmpl", ids, sampling) for ids in prompts]
        request_id = engine_requests[0].request_id
        formatters = [
            CompletionFormatter(
                ctx,
                request_id,
                body.logprobs is not None,
                index_base=i * sampling.n,
                echo=await _echo(ctx, ids, body) if body.echo else None,
            )
            for i, ids in enumerate(prompts)
        ]
        if score_only:
            return _echo_only(engine_requests, formatters, body.stream, _include_usage(body))
        if len(engine_requests) == 1:
            timer = ctx.metrics.start_request()
            return await _respond(
                ctx, request, body.stream, _include_usage(body), engine_requests[0], timer, formatters[0]
            )
        return await _respond_batch(ctx, request, body.stream, _include_usage(body), engine_requests, formatters)

    @router.post("/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        ctx.admit()
        ctx.check_model(body.model)
        reject_unsupported(body)
        _reject_unsupported_chat(body)
        timer = ctx.metrics.start_request()
        messages = tuple({"role": message.role, "content": message.text()} for message in body.messages)
        prompt_ids = ctx.pipeline.prompt_ids(ChatPrompt(messages))
        sampling = openai_sampling(body, _chat_max_tokens(ctx, body, len(prompt_ids)), _chat_logprobs(body))
        engine_request = ctx.new_request("chatcmpl", prompt_ids, sampling)
        formatter = ChatFormatter(ctx, engine_request.request_id, body.logprobs, body.top_logprobs or 0)
        return await _respond(ctx, request, body.stream, _include_usage(body), engine_request, timer, formatter)

    return router


async def _respond(
    ctx: ServerContext,
    request: Request,
    stream: bool,
    include_usage: bool,
    engine_request: GenerateRequest,
    timer: RequestTimer,
    formatter: Formatter,
) -> Response:
    """Runs the request; answers with one JSON body or an SSE stream."""
    headers = {"X-Request-Id": engine_request.request_id}
    try:
        generation = await cancel_on_disconnect(request, Generation.start(ctx.pipeline, engine_request, timer))
        if stream:
            return GenerationStream(generation, _sse([generation], [formatter], include_usage), SSE, headers)
        result = await cancel_on_disconnect(request, generation.collect())
    except ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED)
    if any(sample.finish_reason is FinishReason.ABORT for sample in result.samples):
        raise aborted_error()
    return _json(formatter.response(result), headers)


async def _sse(
    generations: Sequence[Generation], formatters: Sequence[Formatter], include_usage: bool
) -> AsyncIterator[str]:
    """The SSE body of one request or of a batch of prompts (each generation in turn; their
    choice indices tell them apart)."""
    generated = 0
    aborted = False
    try:
        for generation, formatter in zip(generations, formatters, strict=True):
            for chunk in formatter.opening_chunks(generation.request.sampling.n):
                yield _event(chunk)
            async for output in generation.outputs():
                generated += sum(len(delta.token_ids) for delta in output.deltas)
                for chunk in formatter.chunks(output):
                    yield _event(chunk)
                if any(delta.finish_reason is FinishReason.ABORT for delta in output.deltas):
                    yield _event(aborted_error().body)
                    aborted = True
                    break
            if aborted:
                break
        if include_usage:
            prompt_tokens = sum(g.num_prompt_tokens for g in generations)
            usage = Usage(
                prompt_tokens=prompt_tokens, completion_tokens=generated, total_tokens=prompt_tokens + generated
            )
            yield _event(formatters[0].usage_chunk(usage))
    except Exception as exc:  # the engine failed mid-stream; the status line is long gone
        log.exception("request %s failed mid-stream", generations[0].request.request_id)
        yield _event(from_engine_error(exc).body)
    yield "data: [DONE]\n\n"


def _event(payload: BaseModel | Mapping[str, object]) -> str:
    data = payload.model_dump_json() if isinstance(payload, BaseModel) else dumps(payload)
    return f"data: {data}\n\n"


def _json(model: BaseModel, headers: dict[str, str] | None = None) -> Response:
    # pydantic serializes; starlette's JSONResponse would re-encode through json.dumps.
    return Response(model.model_dump_json(), media_type="application/json", headers=headers)


def _model_card(ctx: ServerContext) -> ModelCard:
    return ModelCard(id=ctx.model_name, created=ctx.created, max_model_len=ctx.engine.limits.max_target_length)


def _include_usage(body: CompletionRequest | ChatCompletionRequest) -> bool:
    return body.stream_options is not None and body.stream_options.include_usage


def _completion_prompts(prompt: str | list[str] | list[int] | list[list[int]]) -> list[Prompt]:
    """OpenAI's `prompt`: a string, token ids, or a list of either (a batch, as LangChain's
    batch() sends). Each prompt of a batch is its own engine request."""
    if isinstance(prompt, str):
        return [TextPrompt(prompt)]
    if not prompt:
        raise bad_request("'prompt' must not be empty", "prompt")
    if all(isinstance(item, int) for item in prompt):
        return [TokenPrompt(tuple(prompt))]  # type: ignore[arg-type]
    if len(prompt) > MAX_PROMPTS_PER_REQUEST:
        raise bad_request(f"'prompt' may hold at most {MAX_PROMPTS_PER_REQUEST} prompts, got {len(prompt)}", "prompt")
    prompts: list[Prompt] = []
    for i, item in enumerate(prompt):
        if isinstance(item, str):
            prompts.append(TextPrompt(item, field=f"prompt[{i}]"))
        else:
            prompts.append(TokenPrompt(tuple(item), field=f"prompt[{i}]"))  # type: ignore[arg-type]
    return prompts


async def _echo(ctx: ServerContext, prompt_ids: Sequence[int], body: CompletionRequest) -> Echo:
    """The prompt to echo; with logprobs, each prompt token's logprob (the first has none), as vLLM gives."""
    text = ctx.engine.tokenizer.decode(prompt_ids, skip_special_tokens=False)
    if body.logprobs is None or len(prompt_ids) < 2:
        return Echo(text, tuple(prompt_ids), (None,) * len(prompt_ids))
    try:
        logprobs = await ctx.engine.token_logprobs(prompt_ids[:1], prompt_ids[1:])
    except Exception as exc:
        raise from_engine_error(exc) from exc
    return Echo(text, tuple(prompt_ids), (None, *logprobs))


async def _respond_batch(
    ctx: ServerContext,
    request: Request,
    stream: bool,
    include_usage: bool,
    engine_requests: list[GenerateRequest],
    formatters: list[CompletionFormatter],
) -> Response:
    """Several prompts: every request starts (and may fail) before the response does; the
    stream then sends each request's chunks in turn (their choice indices tell them apart)."""
    generations: list[Generation] = []
    try:
        for engine_request in engine_requests:
            started = Generation.start(ctx.pipeline, engine_request, ctx.metrics.start_request())
            generations.append(await cancel_on_disconnect(request, started))
        if stream:
            body = _sse(generations, formatters, include_usage)
            return _BatchStream(generations, body, SSE, {"X-Request-Id": engine_requests[0].request_id})
        results = await cancel_on_disconnect(request, asyncio.gather(*(g.collect() for g in generations)))
    except ClientDisconnected:
        await _close_all(generations)
        return Response(status_code=CLIENT_CLOSED)
    except BaseException:
        await _close_all(generations)
        raise
    if any(sample.finish_reason is FinishReason.ABORT for result in results for sample in result.samples):
        raise aborted_error()
    return _json(merge_completions([f.response(r) for f, r in zip(formatters, results)]))


def _echo_only(
    engine_requests: list[GenerateRequest], formatters: list[CompletionFormatter], stream: bool, include_usage: bool
) -> Response:
    """The prompts echoed (with their logprobs when asked), nothing generated."""
    n = engine_requests[0].sampling.n
    completions = [
        formatter.response(
            GenerationResult(
                engine_request.request_id,
                len(engine_request.prompt_token_ids),
                tuple(SampleResult(j, finish_reason=FinishReason.LENGTH) for j in range(n)),
            )
        )
        for engine_request, formatter in zip(engine_requests, formatters, strict=True)
    ]
    merged = merge_completions(completions)
    if not stream:
        return _json(merged)
    events = [_event(merged.model_copy(update={"choices": [choice], "usage": None})) for choice in merged.choices]
    if include_usage:
        events.append(_event(merged.model_copy(update={"choices": []})))
    return Response("".join(events) + "data: [DONE]\n\n", media_type=SSE)


class _BatchStream(GenerationStream):
    """Closes every generation of the batch however the stream ends."""

    def __init__(
        self, generations: list[Generation], body: AsyncIterator[str], media_type: str, headers: dict[str, str]
    ) -> None:
        super().__init__(generations[0], body, media_type, headers)
        self._all = generations

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        try:
            await super().__call__(scope, receive, send)
        finally:
            await _close_all(self._all)


async def _close_all(generations: list[Generation]) -> None:
    for generation in generations:
        await generation.aclose()


def _reject_unsupported_completion(body: CompletionRequest) -> None:
    if body.suffix:
        raise bad_request("'suffix' is not supported", "suffix", code="unsupported_parameter")
    if body.best_of is not None and body.best_of != body.n:
        raise bad_request("'best_of' is not supported (only equal to 'n')", "best_of", code="unsupported_parameter")


def _reject_unsupported_chat(body: ChatCompletionRequest) -> None:
    if body.tools:
        raise bad_request("'tools' are not supported", "tools", code="unsupported_parameter")
    if body.response_format is not None and body.response_format.type != "text":
        raise bad_request(
            '\'response_format\' supports only {"type": "text"}', "response_format", code="unsupported_parameter"
        )


def _chat_max_tokens(ctx: ServerContext, body: ChatCompletionRequest, num_prompt_tokens: int) -> int:
    """max_completion_tokens (the new name) or max_tokens; neither: up to the context limit."""
    if body.max_completion_tokens is not None:
        return body.max_completion_tokens
    if body.max_tokens is not None:
        return body.max_tokens
    # At least 1, so that an over-long prompt is reported as such by the limits check.
    return max(1, ctx.engine.limits.max_target_length - num_prompt_tokens)


def _chat_logprobs(body: ChatCompletionRequest) -> int | None:
    if body.top_logprobs is not None:
        if not body.logprobs:
            raise bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
        if not 0 <= body.top_logprobs <= MAX_CHAT_TOP_LOGPROBS:
            raise bad_request(
                f"'top_logprobs' must be between 0 and {MAX_CHAT_TOP_LOGPROBS}, got {body.top_logprobs}", "top_logprobs"
            )
    if not body.logprobs:
        return None
    return body.top_logprobs or 0

"""OpenAI's HTTP API: /v1/completions, /v1/chat/completions, /v1/models.

Streams are server-sent events: `data: <chunk JSON>\\n\\n` per engine output, then, when
`stream_options.include_usage` is true, one chunk with empty `choices` and the `usage`,
then `data: [DONE]\\n\\n`. A request that fails mid-stream gets `data: {"error": ...}`
before [DONE]. Response shapes are checked against the official `openai` client in tests.
"""

from __future__ import annotations

import logging
from typing import AsyncIterator

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel

from tenor.engine.api import FinishReason, GenerateRequest
from tenor.server.http.auth import ApiKeyGuard
from tenor.server.http.context import ServerContext
from tenor.server.http.disconnect import ClientDisconnected, cancel_on_disconnect
from tenor.server.http.errors import bad_request, from_engine_error
from tenor.server.http.formatters import ChatFormatter, CompletionFormatter, Formatter, dumps
from tenor.server.http.generation import Generation, GenerationStream
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
        timer = ctx.metrics.start_request()
        prompt_ids = _completion_prompt(ctx, body.prompt)
        max_tokens = 16 if body.max_tokens is None else body.max_tokens
        sampling = openai_sampling(body, max_tokens, body.logprobs)
        engine_request = ctx.new_request("cmpl", prompt_ids, sampling)
        formatter = CompletionFormatter(ctx, engine_request.request_id, body.logprobs is not None)
        return await _respond(ctx, request, body.stream, _include_usage(body), engine_request, timer, formatter)

    @router.post("/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        ctx.admit()
        ctx.check_model(body.model)
        reject_unsupported(body)
        _reject_unsupported_chat(body)
        timer = ctx.metrics.start_request()
        prompt_ids = _chat_prompt(ctx, body)
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
        generation = await cancel_on_disconnect(request, Generation.start(ctx.engine, engine_request, timer))
        if stream:
            return GenerationStream(generation, _sse(generation, formatter, include_usage), SSE, headers)
        result = await cancel_on_disconnect(request, generation.collect())
    except ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED)
    if any(sample.finish_reason is FinishReason.ABORT for sample in result.samples):
        raise aborted_error()
    return _json(formatter.response(result), headers)


async def _sse(generation: Generation, formatter: Formatter, include_usage: bool) -> AsyncIterator[str]:
    generated = 0
    try:
        for chunk in formatter.opening_chunks(generation.request.sampling.n):
            yield _event(chunk)
        async for output in generation.outputs():
            generated += sum(len(delta.token_ids) for delta in output.deltas)
            for chunk in formatter.chunks(output):
                yield _event(chunk)
            if any(delta.finish_reason is FinishReason.ABORT for delta in output.deltas):
                yield _event(aborted_error().body)
                break
        if include_usage:
            usage = Usage(
                prompt_tokens=generation.num_prompt_tokens,
                completion_tokens=generated,
                total_tokens=generation.num_prompt_tokens + generated,
            )
            yield _event(formatter.usage_chunk(usage))
    except Exception as exc:  # the engine failed mid-stream; the status line is long gone
        log.exception("request %s failed mid-stream", generation.request.request_id)
        yield _event(from_engine_error(exc).body)
    yield "data: [DONE]\n\n"


def _event(payload: BaseModel | dict[str, object]) -> str:
    data = payload.model_dump_json() if isinstance(payload, BaseModel) else dumps(payload)
    return f"data: {data}\n\n"


def _json(model: BaseModel, headers: dict[str, str] | None = None) -> Response:
    # pydantic serializes; starlette's JSONResponse would re-encode through json.dumps.
    return Response(model.model_dump_json(), media_type="application/json", headers=headers)


def _model_card(ctx: ServerContext) -> ModelCard:
    return ModelCard(id=ctx.model_name, created=ctx.created, max_model_len=ctx.engine.limits.max_target_length)


def _include_usage(body: CompletionRequest | ChatCompletionRequest) -> bool:
    return body.stream_options is not None and body.stream_options.include_usage


def _completion_prompt(ctx: ServerContext, prompt: str | list[str] | list[int] | list[list[int]]) -> list[int]:
    """One prompt per request: a string, a list of one string, token ids, or a list of one id list."""
    if isinstance(prompt, str):
        return ctx.engine.tokenizer.encode(prompt)
    if prompt and all(isinstance(item, int) for item in prompt):
        return _checked_ids(ctx, prompt)  # type: ignore[arg-type]
    if len(prompt) != 1:
        raise bad_request(f"'prompt' must hold exactly one prompt, got {len(prompt)}", "prompt")
    only = prompt[0]
    if isinstance(only, str):
        return ctx.engine.tokenizer.encode(only)
    return _checked_ids(ctx, only)  # type: ignore[arg-type]


def _checked_ids(ctx: ServerContext, ids: list[int]) -> list[int]:
    """Token ids from the client index the embedding table: one out of range would fail the
    engine step for every request batched with it. The contract's Tokenizer has no vocab
    size, but tenor's tokenizers do; without one only negative ids can be caught here."""
    vocab_size = getattr(ctx.engine.tokenizer, "vocab_size", None)
    limit = vocab_size if isinstance(vocab_size, int) else None
    for token_id in ids:
        if token_id < 0 or (limit is not None and token_id >= limit):
            valid = f"0 to {limit - 1}" if limit is not None else "0 or more"
            raise bad_request(f"'prompt' token id {token_id} is out of range (valid ids: {valid})", "prompt")
    return list(ids)


def _reject_unsupported_completion(body: CompletionRequest) -> None:
    if body.echo:
        raise bad_request("'echo' is not supported", "echo", code="unsupported_parameter")
    if body.suffix:
        raise bad_request("'suffix' is not supported", "suffix", code="unsupported_parameter")
    if body.best_of is not None and body.best_of != body.n:
        raise bad_request("'best_of' is not supported (only equal to 'n')", "best_of", code="unsupported_parameter")


def _reject_unsupported_chat(body: ChatCompletionRequest) -> None:
    if body.tools:
        raise bad_request("'tools' are not supported", "tools", code="unsupported_parameter")
    if body.response_format is not None and body.response_format.type != "text":
        raise bad_request(
            "'response_format' supports only {\"type\": \"text\"}", "response_format", code="unsupported_parameter"
        )


def _chat_prompt(ctx: ServerContext, body: ChatCompletionRequest) -> list[int]:
    if not body.messages:
        raise bad_request("'messages' must not be empty", "messages")
    messages = [{"role": message.role, "content": message.text()} for message in body.messages]
    try:
        text = ctx.engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    except Exception as exc:  # templates raise on conversations they refuse (roles out of order...)
        raise bad_request(f"the chat template rejected the messages: {exc}", "messages") from exc
    # The template already holds the special tokens (BOS, role markers).
    return ctx.engine.tokenizer.encode(text, add_special_tokens=False)


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


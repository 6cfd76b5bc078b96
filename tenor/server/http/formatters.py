"""Engine outputs -> OpenAI response objects, for /v1/completions and /v1/chat/completions.

A formatter knows one request (its id, creation time, logprob options) and builds both the
whole response (non-streaming) and the stream chunks. Streams send one chunk per sample
per engine output, as OpenAI does, so clients that read `choices[0]` keep working.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from pydantic import BaseModel

from tenor.engine.api import RequestOutput, SampleDelta, Tokenizer, TokenLogprob
from tenor.server.http.context import ServerContext
from tenor.server.http.generation import GenerationResult, SampleResult
from tenor.server.http.schemas import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatDelta,
    ChoiceLogprobs,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    TokenLogprobEntry,
    TopLogprob,
    Usage,
)

LOWEST_LOGPROB = -9999.0  # JSON has no -inf; OpenAI and vLLM report this instead


class Formatter(Protocol):
    def opening_chunks(self, n: int) -> list[BaseModel]: ...

    def chunks(self, output: RequestOutput) -> list[BaseModel]: ...

    def usage_chunk(self, usage: Usage) -> BaseModel: ...

    def response(self, result: GenerationResult) -> BaseModel: ...


def dumps(payload: Mapping[str, object]) -> str:
    return json.dumps(payload)


def usage_of(result: GenerationResult) -> Usage:
    generated = result.num_generated_tokens
    return Usage(
        prompt_tokens=result.num_prompt_tokens,
        completion_tokens=generated,
        total_tokens=result.num_prompt_tokens + generated,
    )


def finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else LOWEST_LOGPROB


def finish_reason(delta: SampleDelta | SampleResult) -> str | None:
    return None if delta.finish_reason is None else delta.finish_reason.value


def worth_sending(delta: SampleDelta) -> bool:
    """Empty deltas happen (bytes held back until they form a whole UTF-8 character)."""
    return bool(delta.text or delta.logprobs or delta.finish_reason is not None)


@dataclass(frozen=True)
class Echo:
    """A prompt echoed before its completion (OpenAI's `echo`)."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float | None, ...]  # one per token; the first is None


def merge_completions(completions: Sequence[BaseModel]) -> Completion:
    """The responses of a batch of prompts as one: all choices (already indexed), summed usage."""
    parts = [c for c in completions if isinstance(c, Completion)]
    choices = [choice for part in parts for choice in part.choices]
    usages = [part.usage for part in parts if part.usage is not None]
    usage = Usage(
        prompt_tokens=sum(u.prompt_tokens for u in usages),
        completion_tokens=sum(u.completion_tokens for u in usages),
        total_tokens=sum(u.total_tokens for u in usages),
    )
    return parts[0].model_copy(update={"choices": choices, "usage": usage})


class CompletionFormatter:
    """Choice `index` is `index_base + sample index`: a batch's prompt i has base i * n, as OpenAI numbers them."""

    def __init__(
        self, ctx: ServerContext, request_id: str, with_logprobs: bool, index_base: int = 0, echo: Echo | None = None
    ) -> None:
        self._id = request_id
        self._index_base = index_base
        self._echo = echo
        self._echoed: set[int] = set()  # samples whose stream already carried the echo
        self._model = ctx.model_name
        self._tokenizer = ctx.engine.tokenizer
        self._created = int(time.time())
        self._with_logprobs = with_logprobs
        self._offsets: dict[int, int] = {}  # sample index -> text offset of its next token

    def opening_chunks(self, n: int) -> list[BaseModel]:
        return []

    def chunks(self, output: RequestOutput) -> list[BaseModel]:
        return [
            self._completion([self._choice(delta.index, delta.text, delta.logprobs, finish_reason(delta))])
            for delta in output.deltas
            if worth_sending(delta)
        ]

    def usage_chunk(self, usage: Usage) -> BaseModel:
        return self._completion([], usage)

    def response(self, result: GenerationResult) -> BaseModel:
        choices = [self._choice(s.index, s.text, s.logprobs, finish_reason(s)) for s in result.samples]
        return self._completion(choices, usage_of(result))

    def _echo_part(self, index: int) -> tuple[str, CompletionLogprobs | None]:
        """The echo's text and logprobs, once per sample (the first chunk, or the whole response)."""
        if self._echo is None or index in self._echoed:
            return "", None
        self._echoed.add(index)
        if not self._with_logprobs:
            return self._echo.text, None
        result = CompletionLogprobs()
        offset = 0
        for token_id, logprob in zip(self._echo.token_ids, self._echo.logprobs):
            token = token_text(self._tokenizer, token_id)
            result.tokens.append(token)
            result.token_logprobs.append(None if logprob is None else finite(logprob))
            result.top_logprobs.append(None if logprob is None else {token: finite(logprob)})
            result.text_offset.append(offset)
            offset += len(token)
        self._offsets[index] = len(self._echo.text)
        return self._echo.text, result

    def _completion(self, choices: list[CompletionChoice], usage: Usage | None = None) -> Completion:
        return Completion(id=self._id, created=self._created, model=self._model, choices=choices, usage=usage)

    def _choice(self, index: int, text: str, logprobs: Sequence[TokenLogprob], reason: str | None) -> CompletionChoice:
        echo_text, echo_logprobs = self._echo_part(index)
        formatted = None
        if self._with_logprobs:
            offset = self._offsets.get(index, 0)
            formatted, self._offsets[index] = completion_logprobs(self._tokenizer, logprobs, offset)
            if echo_logprobs is not None:
                formatted = CompletionLogprobs(
                    tokens=echo_logprobs.tokens + formatted.tokens,
                    token_logprobs=echo_logprobs.token_logprobs + formatted.token_logprobs,
                    top_logprobs=echo_logprobs.top_logprobs + formatted.top_logprobs,
                    text_offset=echo_logprobs.text_offset + formatted.text_offset,
                )
        return CompletionChoice(
            index=self._index_base + index, text=echo_text + text, logprobs=formatted, finish_reason=reason
        )


def completion_logprobs(
    tokenizer: Tokenizer, logprobs: Sequence[TokenLogprob], offset: int
) -> tuple[CompletionLogprobs, int]:
    """The legacy logprobs object; `top_logprobs` always holds the chosen token too, as OpenAI's does.
    Returns it and the text offset after its last token."""
    result = CompletionLogprobs()
    for entry in logprobs:
        token = token_text(tokenizer, entry.token_id)
        top = {token: finite(entry.logprob)}
        for token_id, logprob in entry.top:
            top.setdefault(token_text(tokenizer, token_id), finite(logprob))
        result.tokens.append(token)
        result.token_logprobs.append(finite(entry.logprob))
        result.top_logprobs.append(top)
        result.text_offset.append(offset)
        offset += len(token)
    return result, offset


class ChatFormatter:
    def __init__(self, ctx: ServerContext, request_id: str, with_logprobs: bool, top_logprobs: int) -> None:
        self._id = request_id
        self._model = ctx.model_name
        self._tokenizer = ctx.engine.tokenizer
        self._created = int(time.time())
        self._with_logprobs = with_logprobs
        self._top_logprobs = top_logprobs

    def opening_chunks(self, n: int) -> list[BaseModel]:
        # OpenAI announces the role first, once per choice, with empty content.
        return [
            self._chunk([ChatChunkChoice(index=i, delta=ChatDelta(role="assistant", content=""))]) for i in range(n)
        ]

    def chunks(self, output: RequestOutput) -> list[BaseModel]:
        chunks: list[BaseModel] = []
        for delta in output.deltas:
            if not worth_sending(delta):
                continue
            choice = ChatChunkChoice(
                index=delta.index,
                delta=ChatDelta(content=delta.text),
                logprobs=self._logprobs(delta.logprobs),
                finish_reason=finish_reason(delta),
            )
            chunks.append(self._chunk([choice]))
        return chunks

    def usage_chunk(self, usage: Usage) -> BaseModel:
        return self._chunk([], usage)

    def response(self, result: GenerationResult) -> BaseModel:
        choices = [
            ChatChoice(
                index=sample.index,
                message=AssistantMessage(content=sample.text),
                logprobs=self._logprobs(sample.logprobs),
                finish_reason=finish_reason(sample),
            )
            for sample in result.samples
        ]
        return ChatCompletion(
            id=self._id, created=self._created, model=self._model, choices=choices, usage=usage_of(result)
        )

    def _chunk(self, choices: list[ChatChunkChoice], usage: Usage | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self._id, created=self._created, model=self._model, choices=choices, usage=usage)

    def _logprobs(self, logprobs: Sequence[TokenLogprob]) -> ChoiceLogprobs | None:
        if not self._with_logprobs:
            return None
        return ChoiceLogprobs(content=[self._entry(entry) for entry in logprobs])

    def _entry(self, entry: TokenLogprob) -> TokenLogprobEntry:
        top = [_top(self._tokenizer, token_id, logprob) for token_id, logprob in entry.top[: self._top_logprobs]]
        chosen = _top(self._tokenizer, entry.token_id, entry.logprob)
        return TokenLogprobEntry(token=chosen.token, logprob=chosen.logprob, bytes=chosen.bytes, top_logprobs=top)


def _top(tokenizer: Tokenizer, token_id: int, logprob: float) -> TopLogprob:
    # The token's own bytes: a byte-fallback token's text is U+FFFD, its bytes are not.
    token = token_text(tokenizer, token_id)
    return TopLogprob(token=token, logprob=finite(logprob), bytes=list(tokenizer.token_bytes(token_id)))


def token_text(tokenizer: Tokenizer, token_id: int) -> str:
    # Special tokens stay visible here: a logprob entry for "" would say nothing.
    return tokenizer.decode([token_id], skip_special_tokens=False)

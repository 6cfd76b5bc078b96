"""Engine outputs -> OpenAI response objects, for /v1/completions and /v1/chat/completions.

A formatter knows one request (its id, creation time, logprob options) and builds both the
whole response (non-streaming) and the stream chunks. Streams send one chunk per sample
per engine output, as OpenAI does, so clients that read `choices[0]` keep working.
"""

from __future__ import annotations

import json
import math
import time
from typing import Protocol, Sequence

from pydantic import BaseModel

from tenor.engine.api import RequestOutput, SampleDelta, TokenLogprob, Tokenizer
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


def dumps(payload: dict[str, object]) -> str:
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


class CompletionFormatter:
    def __init__(self, ctx: ServerContext, request_id: str, with_logprobs: bool) -> None:
        self._id = request_id
        self._model = ctx.model_name
        self._tokenizer = ctx.engine.tokenizer
        self._created = int(time.time())
        self._with_logprobs = with_logprobs
        self._offsets: dict[int, int] = {}  # sample index -> text offset of its next token

    def opening_chunks(self, n: int) -> list[BaseModel]:
        return []

    def chunks(self, output: RequestOutput) -> list[BaseModel]:
        return [self._completion([self._choice(delta.index, delta.text, delta.logprobs, finish_reason(delta))])
                for delta in output.deltas if worth_sending(delta)]

    def usage_chunk(self, usage: Usage) -> BaseModel:
        return self._completion([], usage)

    def response(self, result: GenerationResult) -> BaseModel:
        choices = [self._choice(s.index, s.text, s.logprobs, finish_reason(s)) for s in result.samples]
        return self._completion(choices, usage_of(result))

    def _completion(self, choices: list[CompletionChoice], usage: Usage | None = None) -> Completion:
        return Completion(id=self._id, created=self._created, model=self._model, choices=choices, usage=usage)

    def _choice(self, index: int, text: str, logprobs: Sequence[TokenLogprob], reason: str | None) -> CompletionChoice:
        formatted = None
        if self._with_logprobs:
            offset = self._offsets.get(index, 0)
            formatted, self._offsets[index] = completion_logprobs(self._tokenizer, logprobs, offset)
        return CompletionChoice(index=index, text=text, logprobs=formatted, finish_reason=reason)


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
        return [self._chunk([ChatChunkChoice(index=i, delta=ChatDelta(role="assistant", content=""))])
                for i in range(n)]

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
        return ChatCompletion(id=self._id, created=self._created, model=self._model, choices=choices,
                              usage=usage_of(result))

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
    token = token_text(tokenizer, token_id)
    return TopLogprob(token=token, logprob=finite(logprob), bytes=list(token.encode("utf-8")))


def token_text(tokenizer: Tokenizer, token_id: int) -> str:
    # Special tokens stay visible here: a logprob entry for "" would say nothing.
    return tokenizer.decode([token_id], skip_special_tokens=False)

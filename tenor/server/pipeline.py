"""The one request pipeline behind every serving surface (OpenAI and JetStream HTTP,
JetStream's gRPC Orchestrator, the LM gRPC service, `tenor generate`):

    prompt (text, chat messages, token ids) -> ids -> limits, checked once
      -> a named engine request -> outputs -> per-sample results

Surfaces only parse their wire format into a `Prompt` and `SamplingParams`, and frame what
comes back. Every failure here is an `InvalidRequestError` naming the offending field, so
that the error table (tenor.server.error_table) gives each one status everywhere.

A *tokenized* model (SAX's GPT-J configs) reads and writes comma-separated token ids in
place of text: its prompts are parsed as ids and its outputs rendered as ids. One that also
*accepts text* (SAX's multi-host test model) reads a prompt that is not a list of ids as text
and answers that request in text: `for_prompt` gives the pipeline for each request.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field
from typing import AsyncIterator, Mapping, Sequence

from tenor.engine.api import (
    Engine,
    EngineLimits,
    FinishReason,
    GenerateRequest,
    InvalidRequestError,
    RequestOutput,
    SampleDelta,
    SamplingParams,
    TokenLogprob,
)
from tenor.errors import UserError
from tenor.tokenizer.token_ids import format_token_ids, parse_token_ids


@dataclass(frozen=True)
class TextPrompt:
    text: str
    add_special_tokens: bool = True  # False for a continuation (a score's suffix)
    field: str = "prompt"  # the request field it came from, for error messages


@dataclass(frozen=True)
class ChatPrompt:
    messages: tuple[Mapping[str, str], ...]  # {"role", "content"}; the model's template applies
    field: str = "messages"


@dataclass(frozen=True)
class TokenPrompt:
    token_ids: tuple[int, ...]
    field: str = "prompt"


Prompt = TextPrompt | ChatPrompt | TokenPrompt


@dataclass
class SampleResult:
    """One of a request's n samples, accumulated over the whole generation."""

    index: int
    text: str = ""  # for a tokenized model: the comma-separated ids
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    finish_reason: FinishReason | None = None


class Samples:
    """Collects a request's outputs into per-sample results."""

    def __init__(self, pipeline: "RequestPipeline", n: int) -> None:
        self._pipeline = pipeline
        self.results = [SampleResult(i) for i in range(n)]

    def add(self, output: RequestOutput) -> list[str]:
        """Adds one output; returns each sample's new text (by sample index)."""
        new_text = [""] * len(self.results)
        for delta in output.deltas:
            sample = self.results[delta.index]
            piece = self._pipeline.delta_text(delta, sample.text)
            sample.text += piece
            sample.token_ids.extend(delta.token_ids)
            sample.logprobs.extend(delta.logprobs)
            sample.cumulative_logprob = delta.cumulative_logprob
            if delta.finish_reason is not None:
                sample.finish_reason = delta.finish_reason
            new_text[delta.index] += piece
        return new_text


class RequestPipeline:
    """Turns prompts into checked engine requests for one engine."""

    def __init__(self, engine: Engine, tokenized: bool = False, accepts_text: bool = False) -> None:
        self.engine = engine
        self.tokenized = tokenized
        self.accepts_text = accepts_text

    def for_prompt(self, prompt: Prompt) -> "RequestPipeline":
        """The pipeline that reads `prompt` and frames its answers: this one, or, for a
        tokenized model that accepts text, a text pipeline when the prompt is not token ids."""
        if not (self.tokenized and self.accepts_text) or not isinstance(prompt, TextPrompt):
            return self
        try:
            parse_token_ids(prompt.text)
        except UserError:
            return RequestPipeline(self.engine)
        return self

    @property
    def limits(self) -> EngineLimits:
        return self.engine.limits

    def prompt_ids(self, prompt: Prompt) -> tuple[int, ...]:
        """The prompt's token ids; InvalidRequestError (naming the field) if it has none."""
        if isinstance(prompt, TokenPrompt):
            return self.checked_ids(prompt.token_ids, prompt.field)
        if isinstance(prompt, ChatPrompt):
            return self._chat_ids(prompt)
        _check_text(prompt.text, prompt.field)
        if self.tokenized:
            try:
                ids = parse_token_ids(prompt.text)
            except (UserError, ValueError) as exc:
                raise InvalidRequestError(f"'{prompt.field}': {exc} (this model reads token ids)") from None
            return self.checked_ids(ids, prompt.field)
        try:
            return tuple(self.engine.tokenizer.encode(prompt.text, add_special_tokens=prompt.add_special_tokens))
        except UserError as exc:
            raise InvalidRequestError(f"'{prompt.field}': {exc}") from None

    def _chat_ids(self, prompt: ChatPrompt) -> tuple[int, ...]:
        if self.tokenized:
            raise InvalidRequestError(f"'{prompt.field}': this model reads token ids and has no chat template")
        if not prompt.messages:
            raise InvalidRequestError(f"'{prompt.field}' must not be empty")
        for i, message in enumerate(prompt.messages):
            _check_text(message.get("content", ""), f"{prompt.field}[{i}].content")
        try:
            # The template writes the special tokens (BOS, role markers) itself.
            # Read-only mappings: templates only read the messages.
            messages = list(prompt.messages)
            return tuple(self.engine.tokenizer.encode_chat(messages, add_generation_prompt=True))  # type: ignore[arg-type]
        except Exception as exc:  # templates raise on conversations they refuse (roles out of order...)
            raise InvalidRequestError(f"the chat template rejected the '{prompt.field}': {exc}") from exc

    def checked_ids(self, ids: Sequence[int], field_name: str = "prompt") -> tuple[int, ...]:
        """Ids from a client index the embedding table: one out of range would fail the
        engine step for every request batched with it."""
        limit = self.engine.tokenizer.vocab_size
        for token_id in ids:
            if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < limit:
                raise InvalidRequestError(
                    f"'{field_name}' token id {token_id} is out of range (valid ids: 0 to {limit - 1})"
                )
        return tuple(ids)

    def request(self, id_prefix: str, prompt_ids: Sequence[int], sampling: SamplingParams) -> GenerateRequest:
        """Checks the engine's limits (once, here) and names the request."""
        self.limits.check(len(prompt_ids), sampling)
        return GenerateRequest(f"{id_prefix}-{uuid.uuid4().hex}", tuple(prompt_ids), sampling)

    def check_score(self, prefix_ids: Sequence[int], suffix_ids: Sequence[int]) -> None:
        if not suffix_ids:
            raise InvalidRequestError("the suffix is empty")
        self.limits.check_score(len(prefix_ids), len(suffix_ids))

    async def outputs(self, request: GenerateRequest) -> AsyncIterator[RequestOutput]:
        """The engine's outputs. Leaving early (or a cancelled caller) closes the engine's
        iterator, which aborts the request and frees its slot at once."""
        # Engines' generate is an async generator (it has aclose); the Protocol says AsyncIterator.
        async with contextlib.aclosing(self.engine.generate(request)) as outputs:  # type: ignore[type-var]
            async for output in outputs:
                yield output

    async def collect(self, request: GenerateRequest) -> list[SampleResult]:
        samples = Samples(self, request.sampling.n)
        async for output in self.outputs(request):
            samples.add(output)
        return samples.results

    def delta_text(self, delta: SampleDelta, so_far: str) -> str:
        """What a delta appends to its sample's text: the text, or for a tokenized model the ids."""
        if not self.tokenized:
            return delta.text
        if not delta.token_ids:
            return ""
        return ("," if so_far else "") + format_token_ids(delta.token_ids)


def _check_text(text: str, field_name: str) -> None:
    """A lone UTF-16 surrogate (JSON allows "\\ud800") cannot be encoded by any tokenizer."""
    if not isinstance(text, str):
        raise InvalidRequestError(f"'{field_name}' must be a string, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(
            f"'{field_name}' holds a lone surrogate at character {exc.start}; send valid Unicode text"
        ) from None

"""Request and response bodies of the HTTP endpoints, as pydantic models.

Requests are strict: a JSON string where a number belongs is a 400 naming the field, not a
silent coercion; NaN and Infinity are refused. Unknown fields are ignored (as vLLM does)
so that clients sending newer OpenAI parameters keep working; parameters we know but do
not implement are refused by the handlers when set to anything but their neutral value.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Seed = int | None
Stop = str | list[str] | None


class StrictRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class GenerateBody(StrictRequest):
    """JetStream's POST /generate. Greedy unless a temperature is given, like JetStream."""

    prompt: str
    max_tokens: int = 100
    stream: bool = False
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: Seed = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    stop: Stop = None


class StreamOptions(StrictRequest):
    include_usage: bool = False


class SamplingFields(StrictRequest):
    """The OpenAI parameters /v1/completions and /v1/chat/completions share."""

    model: str | None = None
    n: int = 1
    temperature: float | None = None  # None: OpenAI's default of 1
    top_p: float | None = None
    top_k: int | None = None  # an extension (vLLM's); -1 or 0: off
    seed: Seed = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    stop: Stop = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # an extension (vLLM's)
    user: str | None = None
    # Known but not implemented: accepted only at their neutral values.
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = 16  # OpenAI's default for completions
    logprobs: int | None = None
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None


class TextPart(StrictRequest):
    type: Literal["text"]
    text: str


class ChatMessage(StrictRequest):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ResponseFormat(StrictRequest):
    type: str = "text"


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage]
    max_tokens: int | None = None  # None: up to the context limit
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    response_format: ResponseFormat | None = None
    tools: list[dict[str, object]] | None = None


# Responses. Field names and nesting follow OpenAI's API reference.


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    text_offset: list[int] = []


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprobEntry(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprobEntry]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tenor"
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]

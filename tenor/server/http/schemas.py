"""Request and response bodies of the HTTP endpoints, as pydantic models.

Requests are strict: a JSON string where a number belongs is a 400 naming the field, not a
silent coercion; NaN and Infinity are refused. Unknown fields are ignored (as vLLM does)
so that clients sending newer OpenAI parameters keep working; parameters we know but do
not implement are refused by the handlers when set to anything but their neutral value.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Seed = int | None
Stop = str | list[str] | None


class StrictRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _whole_characters(cls, value: object) -> object:
        """JSON may carry a lone surrogate ("\\ud800"), which no tokenizer can encode: it is
        refused here, once, as a 400 naming the field."""
        check_text(value)
        return value


def check_text(value: object) -> None:
    """Raises ValueError if `value` (a string, or strings inside lists and dicts) holds a
    character that is not valid Unicode text (a lone UTF-16 surrogate)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"holds a lone surrogate at character {exc.start}; send valid Unicode text") from None
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_text(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key)
            check_text(item)


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


class TextContent(StrictRequest):
    text: str


class TokenContent(StrictRequest):
    token_ids: list[int]


class DecodeBody(StrictRequest):
    """JetStream's POST /v1/generate: the JSON mirror of its gRPC DecodeRequest."""

    max_tokens: int = Field(default=100, ge=1, le=2**31 - 1)
    text_content: TextContent | None = None
    token_content: TokenContent | None = None
    num_samples: int = Field(default=1, ge=1, le=2**31 - 1)
    lora_adapter_id: str = ""
    has_bos: bool = False

    def to_proto(self):  # -> jetstream_pb2.DecodeRequest (imported late: schemas stay proto-free)
        from tenor.engine.api import InvalidRequestError
        from tenor.proto import jetstream_pb2

        if (self.text_content is None) == (self.token_content is None):
            raise InvalidRequestError("set exactly one of 'text_content' and 'token_content'")
        request = jetstream_pb2.DecodeRequest(
            max_tokens=self.max_tokens,
            num_samples=self.num_samples,
            lora_adapter_id=self.lora_adapter_id,
            has_bos=self.has_bos,
        )
        if self.text_content is not None:
            request.text_content.text = self.text_content.text
        else:
            assert self.token_content is not None
            for token_id in self.token_content.token_ids:
                if not 0 <= token_id < 2**31:
                    raise InvalidRequestError(f"'token_content.token_ids': {token_id} is out of range")
            request.token_content.token_ids.extend(self.token_content.token_ids)
        return request


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


class TokenizeBody(StrictRequest):
    """vLLM's (`prompt`, `messages`) and llama.cpp's (`content`) /tokenize requests."""

    prompt: str | None = None
    content: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True


class DetokenizeBody(StrictRequest):
    tokens: list[int]


# Responses. Field names and nesting follow OpenAI's API reference.


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: list[str] = []
    token_logprobs: list[float | None] = []  # None: an echoed first prompt token (nothing before it)
    top_logprobs: list[dict[str, float] | None] = []
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

"""The engine contract: what every serving surface (HTTP, gRPC, CLI) talks to.

Servers never touch torch. They build a `GenerateRequest`, call `Engine.generate` and
relay the `RequestOutput`s it yields. `tenor.engine.mock_engine.MockEngine` implements
the same contract with hand-checkable arithmetic for fast tests; the real engine
(`tenor.engine.llm_engine.LLMEngine`) runs a model with continuous batching.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import AsyncIterator, Protocol, Sequence, runtime_checkable

MAX_SAMPLES_PER_REQUEST = 16


class EngineError(Exception):
    """Base class of errors that an engine reports to its callers."""


class InvalidRequestError(EngineError, ValueError):
    """The request itself is wrong (HTTP 400, gRPC INVALID_ARGUMENT). The message says why."""


class OverloadedError(EngineError):
    """The waiting queue is full (HTTP 429 with Retry-After, gRPC RESOURCE_EXHAUSTED)."""

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EngineUnavailableError(EngineError):
    """The engine is loading, stopping or dead (HTTP 503, gRPC UNAVAILABLE)."""


@dataclass(frozen=True)
class SamplingParams:
    """Per-request decoding options. temperature 0 means greedy."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0
    seed: int | None = None
    n: int = 1
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    logprobs: int | None = None  # None: off; k: the chosen token's logprob plus the top k
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise InvalidRequestError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise InvalidRequestError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 1 <= self.n <= MAX_SAMPLES_PER_REQUEST:
            raise InvalidRequestError(f"n must be between 1 and {MAX_SAMPLES_PER_REQUEST}, got {self.n}")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise InvalidRequestError(f"logprobs must be between 0 and 20, got {self.logprobs}")
        if any(not s for s in self.stop):
            raise InvalidRequestError("stop strings must not be empty")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


@dataclass(frozen=True)
class GenerateRequest:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)


class FinishReason(str, enum.Enum):
    STOP = "stop"  # an end-of-sequence token, a stop token id or a stop string
    LENGTH = "length"  # max_tokens or the context limit
    ABORT = "abort"  # the caller went away or the server is shutting down


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token_id, logprob), best first


@dataclass(frozen=True)
class SampleDelta:
    """What one sample of a request produced since the previous output."""

    index: int  # which of the request's n samples
    token_ids: tuple[int, ...]
    text: str  # new text; never ends in a broken UTF-8 sequence; stop strings are cut
    cumulative_logprob: float  # the sample's score so far (sum of chosen-token logprobs)
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token in token_ids, when asked for
    finish_reason: FinishReason | None = None


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    deltas: tuple[SampleDelta, ...]
    num_prompt_tokens: int
    finished: bool  # every sample has finished; this is the last output


@dataclass(frozen=True)
class EngineLimits:
    """Limits a surface checks (and reports) before it queues a request."""

    max_prefill_predict_length: int  # longest prompt, in tokens
    max_target_length: int  # prompt + generated tokens
    max_samples: int = MAX_SAMPLES_PER_REQUEST

    def check(self, num_prompt_tokens: int, sampling: SamplingParams) -> None:
        """Raises InvalidRequestError with the numbers, in vLLM's style."""
        if num_prompt_tokens == 0:
            raise InvalidRequestError("the prompt is empty")
        if num_prompt_tokens > self.max_prefill_predict_length:
            raise InvalidRequestError(
                f"This model's maximum prompt length is {self.max_prefill_predict_length} tokens; "
                f"your prompt has {num_prompt_tokens} tokens."
            )
        if num_prompt_tokens + sampling.max_tokens > self.max_target_length:
            raise InvalidRequestError(
                f"'max_tokens' is too large: {sampling.max_tokens}. This model's maximum context "
                f"length is {self.max_target_length} tokens and your request has {num_prompt_tokens} "
                f"input tokens ({sampling.max_tokens} > {self.max_target_length} - {num_prompt_tokens})."
            )
        if sampling.n > self.max_samples:
            raise InvalidRequestError(f"n must be at most {self.max_samples}, got {sampling.n}")

    def check_score(self, num_prefix_tokens: int, num_suffix_tokens: int) -> None:
        """A score is one prefill over prefix + suffix: the prompt limit applies."""
        total = num_prefix_tokens + num_suffix_tokens
        if total > self.max_prefill_predict_length:
            raise InvalidRequestError(
                f"prefix + suffix is {total} tokens; this model scores at most {self.max_prefill_predict_length}"
            )


@dataclass(frozen=True)
class RuntimeInfo:
    """What the engine runs on and with: the CPU, and the precision chosen for it and why."""

    cpu: str  # model name
    isa: str  # e.g. "AVX2 FMA", "AMX AVX512-BF16 AVX-512 AVX2 FMA"
    threads: int
    dtype: str  # activations
    weights: str  # how linear weights are stored: "dense", "fp16", ...
    reason: str
    device: str = "cpu"  # "cpu", or the GPU's name when the model runs on CUDA
    kv_cache: str = ""  # what K/V are stored in: "float32", "bfloat16", "int8" ("" for the model's dtype)

    def describe(self) -> str:
        from tenor.hardware import WEIGHT_LABELS

        weights = WEIGHT_LABELS.get(self.weights, self.weights)
        host = f"{self.cpu} ({self.isa}), {self.threads} threads"
        where = host if self.device == "cpu" else f"{self.device} (host {host})"
        kv = f", K/V cached in {self.kv_cache}" if self.kv_cache else ""
        return f"{where}: {self.dtype} activations, {weights}{kv}; {self.reason}"


@dataclass(frozen=True)
class EngineStats:
    """A snapshot for /metrics, the model server's status and the admin's status page."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float  # fraction of KV blocks in use, 0..1
    prefix_cache_queries: int  # prompt tokens looked up in the prefix cache, cumulative
    prefix_cache_hits: int  # of those, tokens found, cumulative
    num_preemptions: int
    prompt_tokens_total: int
    generation_tokens_total: int
    runtime: RuntimeInfo | None = None  # None until loaded, and for engines without a CPU story


class HealthState(str, enum.Enum):
    LOADING = "loading"
    READY = "ready"
    STUCK = "stuck"  # work is waiting but no step finished for too long
    DEGRADED = "degraded"  # a rank of the model-server group is missing: the replica cannot serve
    STOPPED = "stopped"


@runtime_checkable
class Tokenizer(Protocol):
    """The text side of a model; tenor.tokenizer.Tokenizer implements it."""

    eos_token_ids: tuple[int, ...]
    vocab_size: int  # ids at or past it are out of range
    bos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...

    def apply_chat_template(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str: ...

    def encode_chat(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        """The ids of the rendered conversation (the template writes the special tokens)."""
        ...

    def token_bytes(self, token_id: int) -> bytes:
        """The token's own bytes: for a byte-fallback token the byte, not U+FFFD's."""
        ...


@runtime_checkable
class Engine(Protocol):
    """The serving contract. Async methods must be called on the server's event loop."""

    model_name: str
    limits: EngineLimits
    tokenizer: Tokenizer

    async def start(self) -> None:
        """Load (if needed), warm up, and start stepping. Returns once a forward pass worked."""

    async def stop(self, drain_timeout_s: float = 0.0) -> None:
        """Stop admitting; let running requests finish up to the timeout; abort the rest."""

    def generate(self, request: GenerateRequest) -> AsyncIterator[RequestOutput]:
        """Stream outputs from the first token on. Raises InvalidRequestError or
        OverloadedError before yielding anything. Closing the iterator (client gone)
        aborts the request and frees its slot and KV at once."""

    async def score(self, prefix_token_ids: Sequence[int], suffix_token_ids: Sequence[int]) -> float:
        """log P(suffix | prefix), the sum of the suffix tokens' logprobs."""

    async def token_logprobs(
        self, prefix_token_ids: Sequence[int], suffix_token_ids: Sequence[int]
    ) -> tuple[float, ...]:
        """Each suffix token's logprob given everything before it (what `score` sums)."""

    def health(self) -> HealthState: ...

    def stats(self) -> EngineStats: ...

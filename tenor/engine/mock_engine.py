"""A deterministic engine with hand-checkable output, for fast tests of the surfaces.

Text is bytes: token id = byte value + 3 (0 pad, 1 bos, 2 eos). Each generated token is the
previous token's byte plus one (mod 256), so the prompt "abc" continues "defg...".
Every generated token has logprob -0.5, and every scored token -0.25, so scores are easy
to check: a 4-token continuation scores -2.0.

It keeps the real contract: a bounded waiting queue (OverloadedError), a bounded number of
running requests, a step delay, abort on iterator close, and health.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Sequence

from tenor.engine.api import (
    EngineLimits,
    EngineStats,
    EngineUnavailableError,
    FinishReason,
    GenerateRequest,
    HealthState,
    OverloadedError,
    RequestOutput,
    SampleDelta,
    TokenLogprob,
)
from tenor.tokenizer.byte_tokenizer import BYTE_OFFSET, EOS_ID, Utf8ByteTokenizer

__all__ = ["BYTE_OFFSET", "EOS_ID", "ByteTokenizer", "MockEngine", "next_token"]

TOKEN_LOGPROB = -0.5
SCORE_LOGPROB = -0.25
# The mock speaks the byte tokenizer of test models (token id = byte + 3), so that its
# outputs read like a real test model's.
ByteTokenizer = Utf8ByteTokenizer


def next_token(token_id: int) -> int:
    byte = (token_id - BYTE_OFFSET + 1) % 256 if token_id >= BYTE_OFFSET else 0
    return byte + BYTE_OFFSET


class MockEngine:
    def __init__(
        self,
        model_name: str = "mock",
        max_running: int = 4,
        max_waiting: int = 8,
        step_delay_s: float = 0.001,
        limits: EngineLimits | None = None,
    ) -> None:
        self.model_name = model_name
        self.limits = limits or EngineLimits(max_prefill_predict_length=256, max_target_length=512)
        self.tokenizer = ByteTokenizer()
        self._max_running = max_running
        self._max_waiting = max_waiting
        self._step_delay_s = step_delay_s
        self._slots: asyncio.Semaphore | None = None
        self._waiting = 0
        self._running = 0
        self._state = HealthState.LOADING
        self._prompt_tokens = 0
        self._generated_tokens = 0
        self.aborted: list[str] = []  # request ids whose callers went away (for tests)
        self._abort_all = False

    async def start(self) -> None:
        self._slots = asyncio.Semaphore(self._max_running)
        self._state = HealthState.READY

    async def stop(self, drain_timeout_s: float = 0.0) -> None:
        self._state = HealthState.STOPPED
        deadline = asyncio.get_running_loop().time() + drain_timeout_s
        while self._running and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        self._abort_all = True  # what is still running ends with finish_reason "abort"
        # Bounded: a stream its caller abandoned without closing never runs again.
        deadline = asyncio.get_running_loop().time() + 1.0
        while self._running and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    def health(self) -> HealthState:
        return self._state

    def stats(self) -> EngineStats:
        return EngineStats(
            num_running=self._running,
            num_waiting=self._waiting,
            kv_cache_usage=self._running / self._max_running,
            prefix_cache_queries=0,
            prefix_cache_hits=0,
            num_preemptions=0,
            prompt_tokens_total=self._prompt_tokens,
            generation_tokens_total=self._generated_tokens,
        )

    async def score(self, prefix_token_ids: Sequence[int], suffix_token_ids: Sequence[int]) -> float:
        return float(sum(await self.token_logprobs(prefix_token_ids, suffix_token_ids)))

    async def token_logprobs(
        self, prefix_token_ids: Sequence[int], suffix_token_ids: Sequence[int]
    ) -> tuple[float, ...]:
        self._check_ready()
        return (SCORE_LOGPROB,) * len(suffix_token_ids)

    def generate(self, request: GenerateRequest) -> AsyncIterator[RequestOutput]:
        self._check_ready()
        self.limits.check(len(request.prompt_token_ids), request.sampling)
        if self._waiting >= self._max_waiting:
            raise OverloadedError(f"the waiting queue is full ({self._max_waiting} requests)")
        self._waiting += 1
        return self._stream(request)

    def _check_ready(self) -> None:
        if self._state is not HealthState.READY:
            raise EngineUnavailableError(f"engine is {self._state.value}")

    async def _stream(self, request: GenerateRequest) -> AsyncIterator[RequestOutput]:
        assert self._slots is not None
        finished_normally = False
        admitted = False
        try:
            await self._slots.acquire()
            admitted = True
            self._waiting -= 1
            self._running += 1
            self._prompt_tokens += len(request.prompt_token_ids)
            async for output in self._steps(request):
                yield output
            finished_normally = True
        finally:
            if admitted:
                self._running -= 1
                self._slots.release()
            else:
                self._waiting -= 1
            if not finished_normally:
                self.aborted.append(request.request_id)

    async def _steps(self, request: GenerateRequest) -> AsyncIterator[RequestOutput]:
        sampling = request.sampling
        # Sample i starts from the prompt's last token shifted by i, so samples differ.
        last = [next_token(request.prompt_token_ids[-1]) + i - 1 for i in range(sampling.n)]
        finished = [False] * sampling.n
        for step in range(sampling.max_tokens):
            await asyncio.sleep(self._step_delay_s)
            if self._abort_all:
                deltas = [
                    SampleDelta(i, (), "", TOKEN_LOGPROB * step, (), FinishReason.ABORT)
                    for i in range(sampling.n)
                    if not finished[i]
                ]
                yield RequestOutput(request.request_id, tuple(deltas), len(request.prompt_token_ids), True)
                return
            deltas = []
            for i in range(sampling.n):
                if finished[i]:
                    continue
                token = next_token(last[i])
                last[i] = token
                self._generated_tokens += 1
                stop = token in sampling.stop_token_ids
                finished[i] = stop or step + 1 == sampling.max_tokens
                reason = (FinishReason.STOP if stop else FinishReason.LENGTH) if finished[i] else None
                logprobs = (TokenLogprob(token, TOKEN_LOGPROB),) if sampling.logprobs is not None else ()
                text = "" if stop else self.tokenizer.decode([token])
                deltas.append(SampleDelta(i, (token,), text, TOKEN_LOGPROB * (step + 1), logprobs, reason))
            yield RequestOutput(request.request_id, tuple(deltas), len(request.prompt_token_ids), all(finished))
            if all(finished):
                return

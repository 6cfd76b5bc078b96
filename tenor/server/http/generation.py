"""One engine request as the HTTP layer sees it: started, then streamed or collected, and
always closed, so that a client who goes away frees its decode slot at once.

`Generation.start` waits for the engine's first output before any HTTP response begins:
the engine may reject a request when it is submitted or on its first step, and either
way the client must get a status code (400/429/503), not a 200 stream that breaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from tenor.engine.api import GenerateRequest, RequestOutput
from tenor.server.http.errors import ApiError, from_engine_error
from tenor.server.metrics import RequestTimer
from tenor.server.pipeline import RequestPipeline, SampleResult, Samples

__all__ = ["Generation", "GenerationResult", "GenerationStream", "SampleResult"]


@dataclass(frozen=True)
class GenerationResult:
    request_id: str
    num_prompt_tokens: int
    samples: tuple[SampleResult, ...]

    @property
    def num_generated_tokens(self) -> int:
        return sum(len(sample.token_ids) for sample in self.samples)


class Generation:
    def __init__(
        self,
        pipeline: RequestPipeline,
        request: GenerateRequest,
        outputs: AsyncIterator[RequestOutput],
        first: RequestOutput,
        timer: RequestTimer,
    ) -> None:
        self.pipeline = pipeline
        self.request = request
        self.num_prompt_tokens = first.num_prompt_tokens
        self._outputs = outputs
        self._first: RequestOutput | None = first
        self._timer = timer

    @classmethod
    async def start(cls, pipeline: RequestPipeline, request: GenerateRequest, timer: RequestTimer) -> "Generation":
        """Submits the request and waits for its first output; engine errors become ApiErrors."""
        outputs: AsyncIterator[RequestOutput] | None = None
        try:
            outputs = pipeline.engine.generate(request)
            first = await outputs.__anext__()
        except StopAsyncIteration:
            await _close(outputs)
            raise ApiError(500, "the engine finished the request without any output", "internal_error") from None
        except BaseException as exc:
            await _close(outputs)
            if isinstance(exc, Exception):
                raise from_engine_error(exc) from exc
            raise  # cancellation: the client went away while the request waited
        timer.observe(first)
        return cls(pipeline, request, outputs, first, timer)

    async def outputs(self) -> AsyncIterator[RequestOutput]:
        """Every output from the first on. Leaving the loop early (or being cancelled)
        closes the engine's iterator, which aborts the request in the engine."""
        try:
            if self._first is not None:
                first, self._first = self._first, None
                yield first
            async for output in self._outputs:
                self._timer.observe(output)
                yield output
        finally:
            await _close(self._outputs)
            self._timer.finish(self.request.sampling.n)

    async def collect(self) -> GenerationResult:
        samples = Samples(self.pipeline, self.request.sampling.n)
        async for output in self.outputs():
            samples.add(output)
        return GenerationResult(self.request.request_id, self.num_prompt_tokens, tuple(samples.results))

    async def aclose(self) -> None:
        """Ends the request in the engine if it still runs; harmless after the end."""
        await _close(self._outputs)
        self._timer.finish(self.request.sampling.n)


class GenerationStream(StreamingResponse):
    """Streams `body` (made from `generation`) and closes the generation however the stream
    ends: a body iterator cancelled before its first step never runs its own cleanup."""

    def __init__(self, generation: Generation, body: AsyncIterator[str], media_type: str, headers: dict[str, str]):
        super().__init__(body, media_type=media_type, headers=headers)
        self._generation = generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._generation.aclose()


async def _close(outputs: AsyncIterator[RequestOutput] | None) -> None:
    aclose = getattr(outputs, "aclose", None)
    if aclose is None:
        return
    # Shielded: this runs while the task is being cancelled (client gone), and the
    # engine must still hear about it, or the slot stays busy until max_tokens.
    with anyio.CancelScope(shield=True):
        try:
            await aclose()
        except RuntimeError:
            pass  # the generator is unwinding right now (cancelled inside it): it is closing anyway

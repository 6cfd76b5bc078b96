"""How requests are offered to the server: a closed loop of C workers, or Poisson arrivals.

Both shapes take a `send(prompt)` coroutine that never raises and never outlives its own
timeout, so a run always ends.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence

from tqdm import tqdm

from tenor.bench.metrics import RequestRecord

Send = Callable[[str], Awaitable[RequestRecord]]


@dataclass(frozen=True)
class LoadShape:
    """concurrency alone: closed loop; request_rate (per second): Poisson arrivals, capped at
    concurrency in flight when both are given."""

    concurrency: int | None = 1
    request_rate: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.concurrency is None and self.request_rate is None:
            raise ValueError("give a concurrency, a request rate, or both")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.request_rate is not None and not self.request_rate > 0:
            raise ValueError(f"the request rate must be positive, got {self.request_rate}")

    def describe(self) -> str:
        if self.request_rate is None:
            return f"closed loop, concurrency {self.concurrency}"
        cap = "" if self.concurrency is None else f", at most {self.concurrency} in flight"
        return f"Poisson arrivals at {self.request_rate:g} req/s (seed {self.seed}){cap}"


@dataclass(frozen=True)
class LoadResult:
    records: tuple[RequestRecord, ...]  # in prompt order
    duration_s: float


def arrival_offsets(count: int, rate: float, seed: int) -> list[float]:
    """Send times (seconds from the start) of a Poisson process: exponential gaps, seeded."""
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(count):
        offsets.append(t)
        t += rng.expovariate(rate)
    return offsets


async def _closed_loop(prompts: Sequence[str], send: Send, workers: int, done: Callable[[], None]) -> list[RequestRecord]:
    records: list[RequestRecord | None] = [None] * len(prompts)
    queue = iter(range(len(prompts)))

    async def worker() -> None:
        for i in queue:  # a shared iterator: each index goes to exactly one worker
            records[i] = await send(prompts[i])
            done()

    await asyncio.gather(*(worker() for _ in range(min(workers, len(prompts)))))
    return [r for r in records if r is not None]


async def _poisson(prompts: Sequence[str], send: Send, shape: LoadShape, done: Callable[[], None]) -> list[RequestRecord]:
    assert shape.request_rate is not None
    limit = asyncio.Semaphore(shape.concurrency) if shape.concurrency else None
    start = time.perf_counter()

    async def one(prompt: str) -> RequestRecord:
        if limit is None:
            record = await send(prompt)
        else:
            async with limit:
                record = await send(prompt)
        done()
        return record

    tasks = []
    for prompt, offset in zip(prompts, arrival_offsets(len(prompts), shape.request_rate, shape.seed)):
        await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
        tasks.append(asyncio.create_task(one(prompt)))
    return list(await asyncio.gather(*tasks))


async def run_load(prompts: Sequence[str], send: Send, shape: LoadShape, progress: bool = True) -> LoadResult:
    """Send every prompt once in the given shape; returns the records and the wall time."""
    bar = tqdm(total=len(prompts), unit="req", disable=not progress, leave=False)
    start = time.perf_counter()
    try:
        if shape.request_rate is None:
            assert shape.concurrency is not None
            records = await _closed_loop(prompts, send, shape.concurrency, lambda: bar.update(1))
        else:
            records = await _poisson(prompts, send, shape, lambda: bar.update(1))
    finally:
        bar.close()
    return LoadResult(records=tuple(records), duration_s=time.perf_counter() - start)

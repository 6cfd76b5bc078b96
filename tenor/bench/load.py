"""How requests are offered to the server: a closed loop of C workers, or Poisson arrivals.

Both shapes take a `send(prompt)` coroutine that never raises and never outlives its own
timeout, so a run always ends; an optional time limit ends it sooner.
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
    records: tuple[RequestRecord, ...]  # finished requests, in prompt order
    duration_s: float
    cut_off: int = 0  # in flight at the deadline, abandoned
    not_sent: int = 0  # never sent: the deadline came first


def arrival_offsets(count: int, rate: float, seed: int) -> list[float]:
    """Send times (seconds from the start) of a Poisson process: exponential gaps, seeded."""
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(count):
        offsets.append(t)
        t += rng.expovariate(rate)
    return offsets


class _Run:
    """The prompts, their records, and the optional deadline after which nothing new starts
    and whatever is in flight is abandoned (the client disconnects, so servers can stop)."""

    def __init__(self, prompts: Sequence[str], send: Send, deadline: float | None, done: Callable[[], None]) -> None:
        self.prompts, self.send, self.deadline, self.done = prompts, send, deadline, done
        self.records: list[RequestRecord | None] = [None] * len(prompts)
        self.sent = 0
        self.cut_off = 0

    def open(self) -> bool:
        return self.deadline is None or time.perf_counter() < self.deadline

    async def attempt(self, i: int) -> None:
        if not self.open():
            return
        self.sent += 1
        if self.deadline is None:
            self.records[i] = await self.send(self.prompts[i])
        else:
            try:
                self.records[i] = await asyncio.wait_for(
                    self.send(self.prompts[i]), self.deadline - time.perf_counter()
                )
            except asyncio.TimeoutError:
                self.cut_off += 1
        self.done()


async def _closed_loop(run: _Run, workers: int) -> None:
    queue = iter(range(len(run.prompts)))

    async def worker() -> None:
        for i in queue:  # a shared iterator: each index goes to exactly one worker
            if not run.open():
                return
            await run.attempt(i)

    await asyncio.gather(*(worker() for _ in range(min(workers, len(run.prompts)))))


async def _poisson(run: _Run, shape: LoadShape) -> None:
    assert shape.request_rate is not None
    limit = asyncio.Semaphore(shape.concurrency) if shape.concurrency else None
    start = time.perf_counter()

    async def one(i: int) -> None:
        if limit is None:
            await run.attempt(i)
        else:
            async with limit:
                await run.attempt(i)

    tasks = []
    for i, offset in enumerate(arrival_offsets(len(run.prompts), shape.request_rate, shape.seed)):
        if run.deadline is not None and start + offset >= run.deadline:
            break
        await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)


async def run_load(
    prompts: Sequence[str], send: Send, shape: LoadShape, progress: bool = True, max_duration_s: float | None = None
) -> LoadResult:
    """Send every prompt once in the given shape, or as many as fit in max_duration_s."""
    if max_duration_s is not None and not max_duration_s > 0:
        raise ValueError(f"the maximum duration must be positive, got {max_duration_s}")
    bar = tqdm(total=len(prompts), unit="req", disable=not progress, leave=False)
    start = time.perf_counter()
    run = _Run(prompts, send, None if max_duration_s is None else start + max_duration_s, lambda: bar.update(1))
    try:
        if shape.request_rate is None:
            assert shape.concurrency is not None
            await _closed_loop(run, shape.concurrency)
        else:
            await _poisson(run, shape)
    finally:
        bar.close()
    return LoadResult(
        records=tuple(r for r in run.records if r is not None),
        duration_s=time.perf_counter() - start,
        cut_off=run.cut_off,
        not_sent=len(prompts) - run.sent,
    )

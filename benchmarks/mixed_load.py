"""The mixed load of the disaggregation benchmark (benchmarks/disagg.py): steady streams with
short prompts, restarted as they end, while long prompts arrive at a fixed rate; what each
stream saw (TTFT, gaps between streamed chunks) and its summary."""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

# ---------------------------------------------------------------- prompts


def vocabulary() -> list[str]:
    from tenor.bench.prompts import make_prompts

    words = set()
    for prompt in make_prompts(300, seed=9):
        for word in prompt.lower().split():
            word = word.strip(".,;:?!'\"")
            if word.isalpha():
                words.add(word)
    return sorted(words)


def random_words(rng: random.Random, words: list[str], n: int) -> str:
    return " ".join(rng.choice(words) for _ in range(n))


@dataclass
class Prompts:
    long: list[str]  # exactly sized by the server's tokenizer
    long_tokens: list[int]
    steady_words: int
    words: list[str]
    seed: int

    def steady(self, stream: int, k: int) -> str:
        rng = random.Random(f"{self.seed}-steady-{stream}-{k}")
        return random_words(rng, self.words, self.steady_words)


def make_prompts(base_url: str, count: int, lo: int, hi: int, steady_words: int, seed: int) -> Prompts:
    """`count` long prompts of lo..hi tokens (seeded random words, cut to the target with the
    server's own /tokenize and /detokenize, so both modes see the same token counts)."""
    words = vocabulary()
    rng = random.Random(seed)
    texts, counts = [], []
    with httpx.Client(timeout=60) as client:
        for _ in range(count):
            target = rng.randint(lo, hi)
            text = random_words(rng, words, target)  # more than `target` tokens: words are >= 1 token
            ids = client.post(f"{base_url}/tokenize", json={"prompt": text}).json()["tokens"]
            text = client.post(f"{base_url}/detokenize", json={"tokens": ids[:target]}).json()["prompt"]
            texts.append(text.strip())
            counts.append(client.post(f"{base_url}/tokenize", json={"prompt": texts[-1]}).json()["count"])
    return Prompts(texts, counts, steady_words, words, seed)


# ---------------------------------------------------------------- load


@dataclass
class StreamLog:
    kind: str  # "steady" or "long"
    sent: float
    times: list[float] = field(default_factory=list)  # arrival of each chunk that carries text
    error: str = ""
    done: bool = False
    usage_tokens: int | None = None
    prompt_tokens: int | None = None


async def stream(client: httpx.AsyncClient, url: str, body: dict[str, object], log: StreamLog) -> None:
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                log.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    log.done = True
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    log.error = str(chunk["error"])[:200]
                    return
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    log.times.append(time.perf_counter())
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    log.usage_tokens = usage.get("completion_tokens")
                    log.prompt_tokens = usage.get("prompt_tokens")
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        log.error = f"{type(exc).__name__}: {exc}"[:200]


def body(model: str, prompt: str, max_tokens: int) -> dict[str, object]:
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@dataclass(frozen=True)
class Load:
    streams: int
    stream_tokens: int
    long_every_s: float
    long_max_tokens: int
    ramp_s: float
    measure_s: float
    grace_s: float  # after the window, how long the long prompts still in flight may take


@dataclass
class LoadResult:
    logs: list[StreamLog]
    window: tuple[float, float]
    long_sent: int


async def run_load(url: str, model: str, prompts: Prompts, load: Load, on_window: Any) -> LoadResult:
    logs: list[StreamLog] = []
    t0 = time.perf_counter()
    start, end = t0 + load.ramp_s, t0 + load.ramp_s + load.measure_s
    long_done = asyncio.Event()
    limits = httpx.Limits(max_connections=load.streams + 64, max_keepalive_connections=load.streams + 64)
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), limits=limits) as client:

        async def steady(i: int) -> None:
            k = 0
            while time.perf_counter() < end or not long_done.is_set():
                log = StreamLog("steady", time.perf_counter())
                logs.append(log)
                await stream(client, url, body(model, prompts.steady(i, k), load.stream_tokens), log)
                k += 1
                if log.error:
                    await asyncio.sleep(0.5)

        async def one_long(k: int) -> None:
            log = StreamLog("long", time.perf_counter())
            logs.append(log)
            await stream(client, url, body(model, prompts.long[k % len(prompts.long)], load.long_max_tokens), log)

        async def longs() -> int:
            await asyncio.sleep(max(0.0, start - time.perf_counter()))
            await asyncio.to_thread(on_window, "start")  # scrapes off the loop: chunk times stay true
            tasks = []
            k = 0
            while start + k * load.long_every_s < end:
                await asyncio.sleep(max(0.0, start + k * load.long_every_s - time.perf_counter()))
                tasks.append(asyncio.create_task(one_long(k)))
                k += 1
            await asyncio.sleep(max(0.0, end - time.perf_counter()))
            await asyncio.to_thread(on_window, "end")
            if tasks:
                await asyncio.wait(tasks, timeout=load.grace_s)
            long_done.set()
            return k

        workers = [asyncio.create_task(steady(i)) for i in range(load.streams)]
        try:
            long_sent = await longs()
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
    return LoadResult(logs, (start, end), long_sent)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def summarize_load(result: LoadResult) -> dict[str, object]:
    start, end = result.window
    gaps = []
    tokens_in_window = 0
    for log in result.logs:
        tokens_in_window += sum(1 for t in log.times if start <= t < end)
        if log.kind == "steady":
            gaps += [b - a for a, b in zip(log.times, log.times[1:]) if start <= b < end]
    longs = [log for log in result.logs if log.kind == "long"]
    ttfts = [log.times[0] - log.sent for log in longs if log.times and not log.error]
    # A gap "during a long prefill" overlaps some long prompt's send -> first token (its prefill,
    # the KV transfer and the import on the decode side); the rest saw only steady decoding.
    busy = [(log.sent, log.times[0] if log.times else end) for log in longs]
    during: list[float] = []
    outside: list[float] = []
    for log in result.logs:
        if log.kind == "steady":
            for a, b in zip(log.times, log.times[1:]):
                if start <= b < end:
                    (during if any(a < hi and b > lo for lo, hi in busy) else outside).append(b - a)
    steady = [log for log in result.logs if log.kind == "steady"]
    steady_ttft = [log.times[0] - log.sent for log in steady if log.times and start <= log.sent < end]
    per_chunk = [log.usage_tokens / len(log.times) for log in steady if log.done and log.usage_tokens and log.times]
    errors = sorted({log.error for log in result.logs if log.error})
    return {
        "itl_ms": {
            "count": len(gaps),
            "p50": ms(pct(gaps, 50)),
            "p90": ms(pct(gaps, 90)),
            "p99": ms(pct(gaps, 99)),
            "max": ms(max(gaps) if gaps else None),
            "over_250ms": sum(1 for g in gaps if g > 0.25),
            "during_long_prefill": {"count": len(during), "p50": ms(pct(during, 50)), "p99": ms(pct(during, 99))},
            "otherwise": {"count": len(outside), "p50": ms(pct(outside, 50)), "p99": ms(pct(outside, 99))},
        },
        "long_ttft_ms": {
            "count": len(ttfts),
            "p50": ms(pct(ttfts, 50)),
            "p99": ms(pct(ttfts, 99)),
            "max": ms(max(ttfts) if ttfts else None),
        },
        "long_sent": result.long_sent,
        "long_completed": sum(1 for log in longs if log.done and not log.error),
        "long_prompt_tokens": [log.prompt_tokens for log in longs if log.prompt_tokens is not None],
        "steady_ttft_p50_ms": ms(pct(steady_ttft, 50)),
        "output_tok_s": round(tokens_in_window / (end - start), 1),
        "tokens_per_chunk": round(statistics.mean(per_chunk), 3) if per_chunk else None,
        "steady_requests_completed": sum(1 for log in steady if log.done and not log.error),
        "errors": errors[:5],
        "error_count": sum(1 for log in result.logs if log.error),
    }

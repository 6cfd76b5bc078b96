"""Serving metrics, as `vllm bench serve` defines them, from per-request client timings.

- TTFT: send -> first streamed chunk that carries text.
- TPOT: (latency - TTFT) / (output_tokens - 1), per request with more than one token.
- ITL: every gap between consecutive text chunks, pooled over all requests.
- E2EL: send -> end of stream.
- Throughputs divide by the wall time of the whole run (first send to last finish).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Literal, Sequence

TokenSource = Literal["usage", "chunks"]
SummaryTokenSource = Literal["usage", "chunks", "mixed", "none"]


@dataclass(frozen=True)
class RequestRecord:
    """What the client saw of one request. Times in seconds."""

    ok: bool
    error: str  # "" when ok
    latency_s: float
    ttft_s: float | None  # None when no text chunk arrived
    chunk_gaps_s: tuple[float, ...]
    output_tokens: int
    prompt_tokens: int | None  # from the usage chunk, when the server sent one
    token_source: TokenSource


@dataclass(frozen=True)
class Distribution:
    """Mean and percentiles of one metric, in milliseconds; None where there were no samples."""

    count: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    max_ms: float | None


@dataclass(frozen=True)
class BenchSummary:
    completed: int
    failed: int
    cut_off: int  # still in flight when the run's time limit came; neither ok nor failed
    not_sent: int  # left unsent by the time limit
    duration_s: float
    total_output_tokens: int
    total_prompt_tokens: int | None  # None unless every completed request reported usage
    request_throughput: float  # completed requests / s
    output_throughput: float  # output tokens / s
    total_token_throughput: float | None  # (prompt + output) tokens / s, when prompts were counted
    token_source: SummaryTokenSource
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2el: Distribution
    errors: tuple[tuple[str, int], ...]  # (message, count), most common first


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation between ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values_s: Sequence[float]) -> Distribution:
    if not values_s:
        return Distribution(0, None, None, None, None, None)
    ms = [v * 1000.0 for v in values_s]
    return Distribution(
        count=len(ms),
        mean_ms=sum(ms) / len(ms),
        p50_ms=percentile(ms, 50),
        p90_ms=percentile(ms, 90),
        p99_ms=percentile(ms, 99),
        max_ms=max(ms),
    )


def tpot_s(record: RequestRecord) -> float | None:
    """Time per output token after the first; None when it is undefined for this request."""
    if not record.ok or record.ttft_s is None or record.output_tokens < 2:
        return None
    return (record.latency_s - record.ttft_s) / (record.output_tokens - 1)


def _token_source(done: Sequence[RequestRecord]) -> SummaryTokenSource:
    sources = {r.token_source for r in done}
    if not sources:
        return "none"
    return sources.pop() if len(sources) == 1 else "mixed"


def summarize(records: Sequence[RequestRecord], duration_s: float, cut_off: int = 0, not_sent: int = 0) -> BenchSummary:
    """Fold per-request records into the run's metrics; failed requests count only as failures."""
    if duration_s <= 0:
        raise ValueError(f"the run duration must be positive, got {duration_s}")
    done = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    output_tokens = sum(r.output_tokens for r in done)
    prompt_counts = [r.prompt_tokens for r in done]
    known_counts = [c for c in prompt_counts if c is not None]
    prompt_tokens = sum(known_counts) if done and len(known_counts) == len(prompt_counts) else None
    tpots = [t for t in (tpot_s(r) for r in done) if t is not None]
    errors = collections.Counter(r.error for r in failed).most_common()
    return BenchSummary(
        completed=len(done),
        failed=len(failed),
        cut_off=cut_off,
        not_sent=not_sent,
        duration_s=duration_s,
        total_output_tokens=output_tokens,
        total_prompt_tokens=prompt_tokens,
        request_throughput=len(done) / duration_s,
        output_throughput=output_tokens / duration_s,
        total_token_throughput=None if prompt_tokens is None else (prompt_tokens + output_tokens) / duration_s,
        token_source=_token_source(done),
        ttft=distribution([r.ttft_s for r in done if r.ttft_s is not None]),
        tpot=distribution(tpots),
        itl=distribution([gap for r in done for gap in r.chunk_gaps_s]),
        e2el=distribution([r.latency_s for r in done]),
        errors=tuple(errors),
    )

"""Prometheus metrics of one model server, named like vLLM's with a `tenor:` prefix so
that vLLM dashboards carry over by renaming the prefix.

Two sources: the engine's own counters and gauges, read from `engine.stats()` when
Prometheus scrapes (so they are never stale and cost nothing between scrapes), and
per-request latencies that the HTTP layer observes (`RequestTimer`). Each server owns its
`CollectorRegistry`, so several apps in one process (tests, embedded cells) never clash.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from tenor.engine.api import Engine, FinishReason, RequestOutput

PREFIX = "tenor:"
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
TPOT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
E2E_BUCKETS = (0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 240.0, 480.0)


class EngineStatsCollector(Collector):
    """Turns one `engine.stats()` snapshot into gauges and counters at scrape time."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        stats = self._engine.stats()
        yield _gauge("num_requests_running", "Requests in decode slots.", stats.num_running)
        yield _gauge("num_requests_waiting", "Requests waiting for a slot.", stats.num_waiting)
        yield _gauge("kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0..1).", stats.kv_cache_usage)
        yield _counter(
            "prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", stats.prefix_cache_queries
        )
        yield _counter("prefix_cache_hits", "Prompt tokens found in the prefix cache.", stats.prefix_cache_hits)
        yield _counter("num_preemptions", "Requests preempted to free KV-cache blocks.", stats.num_preemptions)
        yield _counter("prompt_tokens", "Prompt tokens prefilled.", stats.prompt_tokens_total)
        yield _counter("generation_tokens", "Tokens generated.", stats.generation_tokens_total)
        if stats.runtime is not None:
            runtime = stats.runtime
            yield InfoMetricFamily(
                PREFIX + "runtime",
                "The CPU (and GPU) the engine runs on and the precision chosen for it.",
                value={
                    "cpu": runtime.cpu,
                    "isa": runtime.isa,
                    "threads": str(runtime.threads),
                    "dtype": runtime.dtype,
                    "weights": runtime.weights,
                    "device": runtime.device,
                    "kv_cache": runtime.kv_cache,
                },
            )


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    # CounterMetricFamily appends `_total` in the exposition, as Prometheus requires.
    return CounterMetricFamily(PREFIX + name, doc, value=value)


class ServerMetrics:
    """The registry behind /metrics, and the per-request histograms the HTTP layer feeds."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock  # injectable so that tests can check the arithmetic
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(EngineStatsCollector(engine))
        self.time_to_first_token = Histogram(
            PREFIX + "time_to_first_token_seconds",
            "Time from request arrival to the first generated token.",
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.time_per_output_token = Histogram(
            PREFIX + "time_per_output_token_seconds",
            "Mean time between output tokens after the first, per request.",
            buckets=TPOT_BUCKETS,
            registry=self.registry,
        )
        self.e2e_request_latency = Histogram(
            PREFIX + "e2e_request_latency_seconds",
            "Time from request arrival to its last token.",
            buckets=E2E_BUCKETS,
            registry=self.registry,
        )
        self.request_success = Counter(
            PREFIX + "request_success",
            "Finished sequences, by finish reason.",
            ["finished_reason"],
            registry=self.registry,
        )
        for reason in FinishReason:
            self.request_success.labels(finished_reason=reason.value)  # export zeros from the start

    def start_request(self) -> "RequestTimer":
        return RequestTimer(self)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestTimer:
    """Times one request from its arrival; observe each engine output, then `finish()` once.
    A request the engine rejected is simply never finished: it generated nothing."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics
        self._clock = metrics.clock
        self._start = self._clock()
        self._first_token_at: float | None = None
        self._tokens: dict[int, int] = {}  # sample index -> tokens generated
        self._reasons: dict[int, FinishReason] = {}
        self._finished = False

    def observe(self, output: RequestOutput) -> None:
        for delta in output.deltas:
            if delta.token_ids:
                if self._first_token_at is None:
                    self._first_token_at = self._clock()
                self._tokens[delta.index] = self._tokens.get(delta.index, 0) + len(delta.token_ids)
            if delta.finish_reason is not None:
                self._reasons[delta.index] = delta.finish_reason

    def finish(self, num_samples: int) -> None:
        """Records the request; samples that never reported a finish reason count as aborted."""
        if self._finished:
            return
        self._finished = True
        end = self._clock()
        for index in range(num_samples):
            reason = self._reasons.get(index, FinishReason.ABORT)
            self._metrics.request_success.labels(finished_reason=reason.value).inc()
        if self._first_token_at is None:
            return  # rejected or aborted before any token: no latency to speak of
        ttft = self._first_token_at - self._start
        self._metrics.time_to_first_token.observe(ttft)
        self._metrics.e2e_request_latency.observe(end - self._start)
        longest = max(self._tokens.values())
        if longest > 1:
            self._metrics.time_per_output_token.observe((end - self._first_token_at) / (longest - 1))

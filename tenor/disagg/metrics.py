"""Prometheus metrics of disaggregated serving, read at scrape time: what a prefill replica
sent, what a decode replica received (bytes, blocks, latency histogram, failures, in flight)
and how its requests were prefilled (remotely, retried, locally, blocks skipped)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tenor.disagg.transfer import LATENCY_BUCKETS_S, KVTransferService


class DisaggCollector(Collector):
    def __init__(self, service: KVTransferService, decode_role=None) -> None:
        self._service = service
        self._decode_role = decode_role  # tenor.disagg.roles.DecodeRole on a decode replica

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "tenor:kv_transfer_sent_bytes",
            "KV bytes this server sent as a prefill replica.",
            value=self._service.bytes_sent,
        )
        yield CounterMetricFamily(
            "tenor:kv_transfers_sent",
            "KV transfers this server sent as a prefill replica.",
            value=self._service.transfers_sent,
        )
        if self._decode_role is None:
            return
        stats = self._decode_role.transfer.stats
        yield CounterMetricFamily(
            "tenor:kv_transfer_received_bytes", "KV bytes received from prefill replicas.", value=stats.bytes_received
        )
        yield CounterMetricFamily(
            "tenor:kv_transfer_received_blocks",
            "KV blocks received from prefill replicas.",
            value=stats.blocks_received,
        )
        yield CounterMetricFamily(
            "tenor:kv_transfers_failed",
            "KV transfers that failed (error, timeout, checksum or size mismatch).",
            value=stats.transfers_failed,
        )
        yield GaugeMetricFamily(
            "tenor:kv_transfers_in_flight", "KV transfers being received now.", value=stats.in_flight
        )
        cumulative, buckets = 0, []
        for bound, count in zip(LATENCY_BUCKETS_S + (float("inf"),), stats.latency_counts):
            cumulative += count
            buckets.append((str(bound) if bound != float("inf") else "+Inf", cumulative))
        yield HistogramMetricFamily(
            "tenor:kv_transfer_latency_seconds",
            "Prefill + KV transfer time, per successful transfer.",
            buckets=buckets,
            sum_value=stats.latency_sum_s,
        )
        remote = CounterMetricFamily(
            "tenor:disagg_prefills", "Requests by where their prompt was prefilled.", labels=["model", "where"]
        )
        skipped = CounterMetricFamily(
            "tenor:kv_transfer_skipped_blocks",
            "Prompt blocks not requested because the local prefix cache held them.",
            labels=["model"],
        )
        retried = CounterMetricFamily(
            "tenor:kv_transfers_retried", "Transfers retried on another prefill replica or locally.", labels=["model"]
        )
        for model, prefill in sorted(self._decode_role.remotes.items()):
            remote.add_metric([model, "remote"], prefill.stats.remote)
            remote.add_metric([model, "local_fallback"], prefill.stats.local_fallbacks)
            skipped.add_metric([model], prefill.stats.blocks_skipped)
            retried.add_metric([model], prefill.stats.retried)
        yield from (remote, skipped, retried)

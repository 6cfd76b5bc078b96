"""Serving knobs of an engine that are not part of the servable config. Its own module so
that the factory and the engine both import it, and neither imports the other at load."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineOptions:
    """Serving knobs that are not part of the servable config."""

    kv_cache_bytes: int | None = None  # KV budget; None: sized from the config's batch and context
    max_waiting: int = 256  # bounded queue: more waiting requests get OverloadedError
    quantize_kv_cache: bool = False  # int8 KV cache
    warmup: bool = True
    # Tokens per step, decodes plus prompt chunks. 512 against 1024: the same throughput and a lower
    # TTFT at 32 streams on AVX2, AVX-512 and AMX code alike (benchmarks/RESULTS.md), as a burst of
    # prompts finishes two or three a step in half the time, and decodes wait half as long.
    max_num_batched_tokens: int = 512
    group: object = None  # a formed tenor.dist.leader.GroupLeader: the model is sharded over its ranks
    device: str = "cpu"  # "cpu" | "cuda", resolved at the entry point (tenor.hardware.resolve_device)

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
    max_num_batched_tokens: int = 1024  # tokens per step: decodes plus prompt chunks
    group: object = None  # a formed tenor.dist.leader.GroupLeader: the model is sharded over its ranks
    device: str = "cpu"  # "cpu" | "cuda", resolved at the entry point (tenor.hardware.resolve_device)

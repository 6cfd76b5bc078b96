"""Builds a ready-to-start Engine for a servable config and a checkpoint.

Servers (tenor serve, the model server) call only this, so they never import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenor.engine.api import Engine
from tenor.registry import ServableConfig


@dataclass(frozen=True)
class EngineOptions:
    """Serving knobs that are not part of the servable config."""

    kv_cache_bytes: int | None = None  # KV budget; None: sized from the config's batch and context
    max_waiting: int = 256  # bounded queue: more waiting requests get OverloadedError
    quantize_kv_cache: bool = False  # int8 KV cache
    warmup: bool = True
    max_num_batched_tokens: int = 1024  # tokens per step: decodes plus prompt chunks
    group: object = None  # a formed tenor.dist.leader.GroupLeader: the model is sharded over its ranks


def create_engine(servable: ServableConfig, checkpoint: str | None, options: EngineOptions = EngineOptions()) -> Engine:
    """An engine for `servable` with weights from `checkpoint` (None: random test weights or
    the config's default checkpoint). Loading happens in `await engine.start()`."""
    from tenor.engine.llm_engine import LLMEngine  # imports torch: only when an engine is made

    return LLMEngine(servable, checkpoint, options)

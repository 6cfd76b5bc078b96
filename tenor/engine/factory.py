"""Builds a ready-to-start Engine for a servable config and a checkpoint.

Servers (tenor serve, the model server) call only this, so they never import torch.
"""

from __future__ import annotations

from tenor.engine.api import Engine
from tenor.engine.options import EngineOptions
from tenor.registry import ServableConfig

__all__ = ["EngineOptions", "create_engine"]


def create_engine(servable: ServableConfig, checkpoint: str | None, options: EngineOptions = EngineOptions()) -> Engine:
    """An engine for `servable` with weights from `checkpoint` (None: random test weights or
    the config's default checkpoint). Loading happens in `await engine.start()`."""
    from tenor.engine.llm_engine import (
        LLMEngine,  # imports torch: only when an engine is made
    )

    return LLMEngine(servable, checkpoint, options)

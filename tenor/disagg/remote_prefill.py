"""The decode replica's request path: prefill elsewhere, then decode here.

For each request it asks a prefill replica (the least loaded by its own count of transfers in
flight) for the prompt's KV blocks, skipping the leading blocks its prefix cache already
holds, and hands them to its engine with the request. A failed, corrupted, truncated or
stalled transfer is retried on the next prefill replica; when none answers in time the
engine prefills the prompt itself, so the request still succeeds. Streaming, n, stop strings,
logprobs and cancellation are the engine's as in interleaved mode.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from tenor.disagg.kv_blocks import KVBlocks, TransferError
from tenor.disagg.transfer import KVTransfer
from tenor.engine.api import (
    EngineUnavailableError,
    GenerateRequest,
    OverloadedError,
    RequestOutput,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RemotePrefillConfig:
    timeout_s: float = 30.0  # per transfer attempt
    max_attempts: int = 2  # prefill replicas tried before prefilling locally

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"remote prefill timeout must be > 0 seconds, got {self.timeout_s}")
        if self.max_attempts < 1:
            raise ValueError(f"remote prefill needs at least one attempt, got {self.max_attempts}")


@dataclass
class RemotePrefillStats:
    remote: int = 0  # requests whose blocks came from a prefill replica
    retried: int = 0  # transfers that failed and were retried elsewhere
    local_fallbacks: int = 0  # requests prefilled here after every attempt failed
    blocks_skipped: int = 0  # blocks not requested because the prefix cache held them


class RemotePrefill:
    def __init__(
        self,
        transfer: KVTransfer,
        prefill_targets: Callable[[], list[str]],
        config: RemotePrefillConfig = RemotePrefillConfig(),
    ) -> None:
        self._transfer = transfer
        self._targets = prefill_targets  # addresses of the model's prefill replicas, e.g. from WatchLoc
        self._config = config
        self._in_flight: dict[str, int] = {}
        self.stats = RemotePrefillStats()

    def _ranked(self) -> list[str]:
        targets = list(dict.fromkeys(self._targets()))
        return sorted(targets, key=lambda t: self._in_flight.get(t, 0))[: self._config.max_attempts]

    async def fetch_blocks(
        self, engine, model_key: str, prompt_token_ids: tuple[int, ...], block_size: int
    ) -> KVBlocks | None:
        """The prompt's missing blocks from a prefill replica, or None: prefill locally."""
        num_full = len(prompt_token_ids) // block_size
        held = engine.held_prefix_blocks(prompt_token_ids)
        self.stats.blocks_skipped += held
        if held >= num_full:
            return None  # nothing worth moving: the tail runs here anyway
        for attempt, target in enumerate(self._ranked()):
            self._in_flight[target] = self._in_flight.get(target, 0) + 1
            try:
                blocks = await self._transfer.fetch(target, model_key, prompt_token_ids, held, self._config.timeout_s)
                self.stats.remote += 1
                return blocks
            except (TransferError, OverloadedError, EngineUnavailableError) as exc:
                log.warning("prefill on %s failed (attempt %d): %s", target, attempt + 1, exc)
                self.stats.retried += 1
            finally:
                self._in_flight[target] -= 1
        self.stats.local_fallbacks += 1
        return None

    async def generate(
        self, engine, model_key: str, request: GenerateRequest, block_size: int
    ) -> AsyncIterator[RequestOutput]:
        blocks = await self.fetch_blocks(engine, model_key, request.prompt_token_ids, block_size)
        async for output in engine.generate(request, incoming_kv=blocks):
            yield output

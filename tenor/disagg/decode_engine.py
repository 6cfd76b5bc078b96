"""A decode replica's engine: the local engine, with prompts prefilled on prefill replicas.

Wraps any engine that accepts `incoming_kv` (LLMEngine) so that every serving surface (LM
gRPC, HTTP faces, OpenAI API) gets disaggregation without knowing about it: `generate`
fetches the prompt's KV blocks through RemotePrefill, then decodes locally. Everything else
(score, health, stats, tokenizer, start/stop) is the wrapped engine's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from tenor.disagg.remote_prefill import RemotePrefill
from tenor.engine.api import GenerateRequest, RequestOutput


class DecodeEngine:
    def __init__(
        self, inner, model_key: str, remote: RemotePrefill, block_size: int, on_stop: Callable[[], None] | None = None
    ) -> None:
        self._inner = inner
        self.model_key = model_key
        self.remote = remote
        self._block_size = block_size
        self._on_stop = on_stop  # e.g. stops watching the admin for prefill replicas

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    async def stop(self, drain_timeout_s: float = 0.0) -> None:
        try:
            await self._inner.stop(drain_timeout_s)
        finally:
            if self._on_stop is not None:
                self._on_stop()

    def generate(self, request: GenerateRequest) -> AsyncIterator[RequestOutput]:
        # Bad input and a full queue fail here, before any transfer, as the Engine contract asks.
        if hasattr(self._inner, "check_admission"):
            self._inner.check_admission(request)
        else:
            self._inner.limits.check(len(request.prompt_token_ids), request.sampling)
        return self.remote.generate(self._inner, self.model_key, request, self._block_size)

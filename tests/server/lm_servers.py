"""Test helpers: LM gRPC servers over MockEngine, in-process (own event loop thread)."""

from __future__ import annotations

import asyncio
import threading

import grpc

from tenor.engine.api import EngineUnavailableError, HealthState
from tenor.engine.mock_engine import MockEngine
from tenor.proto import lm_pb2_grpc
from tenor.server.lm_service import LMService, ModelNotServedError, ReadyModel


class FakeModels:
    """ModelLookup over a dict of engines; records latencies."""

    def __init__(self, engines: dict[str, MockEngine], tokenized: bool = False, accepts_text: bool = False) -> None:
        self.engines = engines
        self.tokenized = tokenized
        self.accepts_text = accepts_text
        self.latencies: list[float] = []
        self.failures = 0

    def ready(self, model_key: str) -> ReadyModel:
        if model_key not in self.engines:
            raise ModelNotServedError(f"{model_key} is not served here")
        engine = self.engines[model_key]
        if engine.health() is not HealthState.READY:
            raise EngineUnavailableError(f"{model_key} is {engine.health().value}")
        return ReadyModel(engine, self.tokenized, self.latencies.append, self._failed, self.accepts_text)

    def _failed(self) -> None:
        self.failures += 1


class LMServerThread:
    """An LM gRPC server on 127.0.0.1 with one MockEngine per model, run on its own loop.

    Use as a context manager; `kill()` stops it at once (callers then get UNAVAILABLE).
    """

    def __init__(self, model_names: list[str], start_engines: bool = True, **engine_kwargs: object) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._start_engines = start_engines
        self.models = FakeModels({name: MockEngine(model_name=name, **engine_kwargs) for name in model_names})
        self.address = ""
        self._server: grpc.aio.Server | None = None

    def __enter__(self) -> "LMServerThread":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _start(self) -> None:
        if self._start_engines:
            for engine in self.models.engines.values():
                await engine.start()
        self._server = grpc.aio.server()
        lm_pb2_grpc.add_LMServiceServicer_to_server(LMService(self.models), self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        self.address = f"127.0.0.1:{port}"

    def kill(self) -> None:
        if self._server is not None and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._server.stop(0), self._loop).result(10)
            self._server = None

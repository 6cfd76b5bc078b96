"""The models one model server holds, and the Modelet service the admin drives them with.

`ModelTable` loads each model in a background task (so GetStatus, the admin's heartbeat,
answers LOADING at once and never waits on a load), keeps a failure's reason, and hands
ready engines to the LM service. `ModeletService` is the thin gRPC face over it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping

import grpc

from tenor import registry
from tenor.admin.roles import BOTH, parse_role
from tenor.engine.api import Engine, EngineUnavailableError, HealthState
from tenor.engine.factory import EngineOptions, create_engine
from tenor.errors import UserError
from tenor.proto import common_pb2, modelet_pb2, modelet_pb2_grpc
from tenor.registry import ADMIN_KEYS, ServableConfig, serving_overrides
from tenor.server.lm_service import ModelNotServedError, ReadyModel

Status = common_pb2.ModelStatus
LATENCY_WINDOW = 1000  # recent requests the percentiles cover
EngineFactory = Callable[[ServableConfig, "str | None", EngineOptions], Engine]
# Gives a loaded engine its role (disaggregated serving): the engine itself, or a wrapper
# such as a decode replica's DecodeEngine; raises (a one-line reason) for a role it cannot take.
RoleWrapper = Callable[[str, Engine, str], Engine]


class LoadFailedError(Exception):
    """A load failed; the message is the reason (also kept in GetStatus)."""

    def __init__(self, reason: str, bad_spec: bool = False) -> None:
        super().__init__(reason)
        self.bad_spec = bad_spec  # the config or an override is wrong, wherever it is loaded


@dataclass(frozen=True)
class ModelSpec:
    """What to load: a registry config, a checkpoint (None: the config's own), overrides, and
    the role it runs in ("both", "prefill" or "decode"; checked when loaded)."""

    config_name: str
    checkpoint: str | None
    overrides: tuple[tuple[str, str], ...] = ()
    role: str = BOTH

    @staticmethod
    def of(config_name: str, checkpoint: str, overrides: Mapping[str, str], role: str = "") -> "ModelSpec":
        serving = {k: v for k, v in overrides.items() if k not in ADMIN_KEYS}
        return ModelSpec(config_name, checkpoint or None, tuple(sorted(serving.items())), role or BOTH)

    def servable(self) -> ServableConfig:
        return registry.get(self.config_name).with_overrides(**serving_overrides(dict(self.overrides)))


class LatencyWindow:
    """End-to-end latencies of the most recent requests, for p50/p95/p99."""

    def __init__(self, size: int = LATENCY_WINDOW) -> None:
        self._seconds: deque[float] = deque(maxlen=size)

    def add(self, seconds: float) -> None:
        self._seconds.append(seconds)

    def percentile_ms(self, q: float) -> float:
        if not self._seconds:
            return 0.0
        ordered = sorted(self._seconds)
        return 1000.0 * ordered[min(len(ordered) - 1, int(q / 100.0 * len(ordered)))]


@dataclass
class ServedModel:
    name: str
    spec: ModelSpec
    status: int = Status.LOADING
    failure_reason: str = ""
    bad_spec: bool = False  # the failure is the spec's (unknown config, bad override)
    servable: ServableConfig | None = None
    engine: Engine | None = None
    loaded_at: float = 0.0  # unix seconds
    task: asyncio.Task | None = None  # the running load
    latency: LatencyWindow = field(default_factory=LatencyWindow)
    requests_ok: int = 0
    requests_failed: int = 0

    def record(self, seconds: float) -> None:
        self.requests_ok += 1
        self.latency.add(seconds)

    def record_failure(self) -> None:
        self.requests_failed += 1


class ModelTable:
    """The models on this server by full name. All methods run on the server's event loop."""

    def __init__(
        self,
        engine_factory: EngineFactory = create_engine,
        options: EngineOptions = EngineOptions(),
        drain_timeout_s: float = 5.0,
        wrap_engine: RoleWrapper | None = None,
    ) -> None:
        self._engine_factory = engine_factory
        self._wrap_engine = wrap_engine  # None: this table runs models interleaved ("both") only
        self._options = options
        self._drain_timeout_s = drain_timeout_s
        self._models: dict[str, ServedModel] = {}

    def models(self) -> list[ServedModel]:
        return [self._models[name] for name in sorted(self._models)]

    def ready(self, model_key: str) -> ReadyModel:
        served = self._models.get(model_key)
        if served is None:
            raise ModelNotServedError(f"{model_key} is not loaded on this server")
        if served.status != Status.LOADED or served.engine is None or served.servable is None:
            reason = f": {served.failure_reason}" if served.failure_reason else ""
            raise EngineUnavailableError(f"{model_key} is {Status.Name(served.status)}{reason}")
        servable = served.servable
        return ReadyModel(
            served.engine, servable.tokenized, served.record, served.record_failure, servable.accepts_text
        )

    async def load(self, name: str, spec: ModelSpec) -> None:
        """Returns once loaded; raises LoadFailedError with the reason. Idempotent for the same spec."""
        while name in self._models and self._models[name].status == Status.UNLOADING:
            await asyncio.sleep(0.05)  # an unload in progress finishes first (bounded by its drain)
        served = self._models.get(name)
        if served is not None and served.status in (Status.LOADING, Status.LOADED):
            if served.spec != spec:
                raise LoadFailedError(f"{name} is already {Status.Name(served.status)} here with another spec")
        else:
            served = self._models[name] = ServedModel(name, spec)
            served.task = asyncio.create_task(self._start(served))
        await self._wait_loaded(served)

    async def update_loaded(self, name: str, spec: ModelSpec) -> None:
        """Reloads `name` with a new spec: LOADING meanwhile, then LOADED or FAILED."""
        served = self._models.get(name)
        if served is None:
            raise ModelNotServedError(f"{name} is not loaded on this server")
        await self._stop(served)
        replacement = self._models[name] = ServedModel(name, spec)
        replacement.task = asyncio.create_task(self._start(replacement))
        await self._wait_loaded(replacement)

    async def unload(self, name: str) -> None:
        """Stops and forgets `name`; requests in flight get drain_timeout_s to finish."""
        served = self._models.get(name)
        if served is None:
            return
        served.status = Status.UNLOADING
        await self._stop(served)
        if self._models.get(name) is served:
            del self._models[name]

    async def close(self) -> None:
        await asyncio.gather(*(self.unload(name) for name in list(self._models)))

    async def _wait_loaded(self, served: ServedModel) -> None:
        assert served.task is not None
        # wait() rather than await: a load cancelled by Unload must not cancel this caller.
        await asyncio.wait({served.task})
        if served.status != Status.LOADED:
            raise LoadFailedError(served.failure_reason or f"{served.name} was unloaded while loading", served.bad_spec)

    async def _start(self, served: ServedModel) -> None:
        try:
            role = parse_role(served.spec.role)
            if role != BOTH and self._wrap_engine is None:
                raise UserError(
                    f"this model server cannot run a model as {role} (a model-server group does not move KV blocks)"
                )
            served.servable = served.spec.servable()
        except (UserError, ValueError) as exc:
            served.status, served.failure_reason, served.bad_spec = Status.FAILED, _one_line(exc), True
            return
        try:
            # The factory may import torch (seconds): off the loop, so heartbeats keep flowing.
            served.engine = await asyncio.to_thread(
                self._engine_factory, served.servable, served.spec.checkpoint, self._options
            )
            await served.engine.start()
            if self._wrap_engine is not None:
                served.engine = self._wrap_engine(served.name, served.engine, role)
        except Exception as exc:  # any load failure is the model's, never the server's
            served.status = Status.FAILED
            served.failure_reason = _one_line(exc)
            if served.engine is not None:
                await _quietly_stop(served.engine)
            return
        if served.status == Status.LOADING:
            served.status = Status.LOADED
            served.loaded_at = time.time()

    async def _stop(self, served: ServedModel) -> None:
        if served.task is not None and not served.task.done():
            served.task.cancel()
            await asyncio.wait({served.task})
        if served.engine is not None:
            await _quietly_stop(served.engine, self._drain_timeout_s)


async def _quietly_stop(engine: Engine, drain_timeout_s: float = 0.0) -> None:
    try:
        await engine.stop(drain_timeout_s)
    except Exception:  # a half-started engine may fail to stop; it is dropped either way
        pass


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def model_state(served: ServedModel) -> modelet_pb2.ModelState:
    stats = served.engine.stats() if served.engine is not None and served.status == Status.LOADED else None
    reason = served.failure_reason
    if served.engine is not None and served.engine.health() is HealthState.DEGRADED:
        reason = "degraded: a rank of this model-server group is missing"
    return modelet_pb2.ModelState(
        model_name=served.name,
        config_name=served.spec.config_name,
        checkpoint=served.spec.checkpoint or "",
        status=served.status,  # type: ignore[arg-type]  # an enum value held as int; the stubs want the enum type
        failure_reason=reason,
        queue_depth=stats.num_waiting if stats else 0,
        running=stats.num_running if stats else 0,
        latency_p50_ms=served.latency.percentile_ms(50),
        latency_p95_ms=served.latency.percentile_ms(95),
        latency_p99_ms=served.latency.percentile_ms(99),
        loaded_at=served.loaded_at,
        requests_ok=served.requests_ok,
        requests_failed=served.requests_failed,
        role=served.spec.role,
    )


class ModeletService(modelet_pb2_grpc.ModeletServicer):
    def __init__(self, table: ModelTable, started_at: float | None = None) -> None:
        self._table = table
        self._started = time.monotonic() if started_at is None else started_at

    async def Load(
        self, request: modelet_pb2.LoadRequest, context: grpc.aio.ServicerContext
    ) -> modelet_pb2.LoadResponse:
        spec = ModelSpec.of(request.config_name, request.checkpoint, request.overrides, request.role)
        try:
            await self._table.load(request.model_name, spec)
        except LoadFailedError as exc:
            await context.abort(_load_failure_code(exc), str(exc))
        return modelet_pb2.LoadResponse()

    async def Unload(
        self, request: modelet_pb2.UnloadRequest, context: grpc.aio.ServicerContext
    ) -> modelet_pb2.UnloadResponse:
        await self._table.unload(request.model_name)
        return modelet_pb2.UnloadResponse()

    async def UpdateLoaded(
        self, request: modelet_pb2.UpdateLoadedRequest, context: grpc.aio.ServicerContext
    ) -> modelet_pb2.UpdateLoadedResponse:
        current = next((s for s in self._table.models() if s.name == request.model_name), None)
        spec = ModelSpec.of(  # a reload keeps the config and the role
            current.spec.config_name if current else "",
            request.checkpoint,
            request.overrides,
            current.spec.role if current else "",
        )
        try:
            await self._table.update_loaded(request.model_name, spec)
        except ModelNotServedError as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except LoadFailedError as exc:
            await context.abort(_load_failure_code(exc), str(exc))
        return modelet_pb2.UpdateLoadedResponse()

    async def GetStatus(
        self, request: modelet_pb2.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> modelet_pb2.GetStatusResponse:
        states = [model_state(served) for served in self._table.models()]
        memory = sum(
            s.servable.memory(s.spec.checkpoint).weight_bytes
            for s in self._table.models()
            if s.servable and s.status == Status.LOADED
        )
        server = modelet_pb2.ServerStats(
            uptime_s=time.monotonic() - self._started,
            queue_depth=sum(s.queue_depth for s in states),
            running=sum(s.running for s in states),
            memory_used_bytes=memory,
        )
        return modelet_pb2.GetStatusResponse(models=states, server=server)


def _load_failure_code(exc: LoadFailedError) -> grpc.StatusCode:
    # Never UNAVAILABLE: the admin reads that as "this server is going away".
    return grpc.StatusCode.INVALID_ARGUMENT if exc.bad_spec else grpc.StatusCode.FAILED_PRECONDITION

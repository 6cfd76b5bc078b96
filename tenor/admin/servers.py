"""The admin's view of one joined model server: its spec, what it holds, and a FIFO of
Modelet calls (Load, Unload, UpdateLoaded) so actions on one server never overlap.

What the server reports in GetStatus is the truth, except for models with an action in
flight, whose status the admin predicts (LOADING, UNLOADING) until the action ends; so a
poll that raced a Load cannot make the admin place the replica a second time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import grpc

from tenor.admin.assigner import ReplicaStatus, ServerView
from tenor.admin.roles import BOTH, ROLES
from tenor.proto import common_pb2, modelet_pb2, modelet_pb2_grpc

log = logging.getLogger(__name__)

# A failed RPC with these codes says the server is going away, not that the model is bad.
TRANSIENT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED})
_FROM_PROTO = {
    common_pb2.LOADING: ReplicaStatus.LOADING,
    common_pb2.LOADED: ReplicaStatus.LOADED,
    common_pb2.FAILED: ReplicaStatus.FAILED,
    common_pb2.UNLOADING: ReplicaStatus.UNLOADING,
}


@dataclass
class Replica:
    status: ReplicaStatus
    config_name: str = ""
    checkpoint: str = ""  # "" = None
    failure_reason: str = ""
    queue_depth: int = 0
    running: int = 0
    latency_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)  # p50, p95, p99
    role: str = BOTH  # "both", "prefill" or "decode" (disaggregated serving)


@dataclass(frozen=True)
class ActionResult:
    server: str
    model: str
    kind: str  # "load", "unload" or "update"
    token: int  # the model generation the action was issued for
    ok: bool
    transient: bool = False  # failed because the server is unreachable
    reason: str = ""


@dataclass
class ServerSpecView:
    platform: str
    memory_bytes: int
    tags: frozenset[str]
    servable_configs: frozenset[str]
    group_size: int = 1  # ranks of its model-server group

    @classmethod
    def from_proto(cls, spec: common_pb2.ServerSpec) -> "ServerSpecView":
        return cls(
            spec.platform,
            spec.memory_bytes,
            frozenset(spec.tags),
            frozenset(spec.servable_configs),
            max(spec.group_size, 1),
        )


@dataclass
class ModelServer:
    address: str
    http_address: str
    spec: ServerSpecView
    on_result: Callable[[ActionResult], None]
    rpc_timeout_s: float = 1.0
    load_timeout_s: float = 900.0
    replicas: dict[str, Replica] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # model -> actions queued or running
    polled: bool = False  # first GetStatus done: its replicas are known
    healthy: bool = True
    last_ok: float = field(default_factory=time.monotonic)
    uptime_s: float = 0.0
    dial: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel  # CellAccess.aio_channel in a cell

    def __post_init__(self) -> None:
        self._channel = self.dial(self.address)
        self._stub = modelet_pb2_grpc.ModeletStub(self._channel)
        self._queue: asyncio.Queue[Callable[[], Awaitable[tuple[ActionResult, Replica | None]]]] = asyncio.Queue()
        self._worker = asyncio.get_running_loop().create_task(self._work())

    async def close(self) -> None:
        self._worker.cancel()
        await asyncio.gather(self._worker, return_exceptions=True)
        await self._channel.close(grace=None)

    # --- heartbeat -----------------------------------------------------------------------

    async def poll(self) -> bool:
        try:
            status = await self._stub.GetStatus(modelet_pb2.GetStatusRequest(), timeout=self.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            self.healthy = False
            log.debug("GetStatus %s failed: %s", self.address, exc.code())
            return False
        reported = {}
        for m in status.models:
            if m.status in _FROM_PROTO:
                reported[m.model_name] = Replica(
                    _FROM_PROTO[m.status],
                    m.config_name,
                    m.checkpoint,
                    m.failure_reason,
                    m.queue_depth,
                    m.running,
                    (m.latency_p50_ms, m.latency_p95_ms, m.latency_p99_ms),
                    m.role if m.role in ROLES else BOTH,
                )
        for name in self.pending:  # an action in flight: keep the admin's prediction
            if name in self.replicas:
                reported[name] = self.replicas[name]
            else:
                reported.pop(name, None)
        self.replicas = reported
        self.uptime_s = status.server.uptime_s
        self.polled = self.healthy = True
        self.last_ok = time.monotonic()
        return True

    def view(self) -> ServerView:
        return ServerView(
            self.address,
            self.spec.memory_bytes,
            self.spec.platform,
            self.spec.tags,
            self.spec.servable_configs,
            tuple(sorted((name, r.status) for name, r in self.replicas.items())),
            draining=not self.healthy,
            group_size=self.spec.group_size,
            roles=tuple(sorted((n, r.role) for n, r in self.replicas.items() if r.role != BOTH)),
        )

    # --- actions -------------------------------------------------------------------------

    def start_load(self, request: modelet_pb2.LoadRequest, token: int) -> None:
        self._begin(
            request.model_name,
            Replica(ReplicaStatus.LOADING, request.config_name, request.checkpoint, role=request.role or BOTH),
        )
        self._queue.put_nowait(lambda: self._call("load", request, token, self._stub.Load, self.load_timeout_s))

    def start_update(self, request: modelet_pb2.UpdateLoadedRequest, token: int) -> None:
        old = self.replicas.get(request.model_name)
        self._begin(
            request.model_name,
            Replica(
                ReplicaStatus.LOADING,
                old.config_name if old else "",
                request.checkpoint,
                role=old.role if old else BOTH,
            ),
        )
        self._queue.put_nowait(
            lambda: self._call("update", request, token, self._stub.UpdateLoaded, self.load_timeout_s)
        )

    def start_unload(self, model_name: str, token: int) -> None:
        old = self.replicas.get(model_name)
        self._begin(
            model_name, Replica(ReplicaStatus.UNLOADING, old.config_name if old else "", role=old.role if old else BOTH)
        )
        request = modelet_pb2.UnloadRequest(model_name=model_name)
        self._queue.put_nowait(lambda: self._call("unload", request, token, self._stub.Unload, self.load_timeout_s))

    def _begin(self, model_name: str, predicted: Replica) -> None:
        self.pending[model_name] = self.pending.get(model_name, 0) + 1
        self.replicas[model_name] = predicted

    async def _call(
        self,
        kind: str,
        request: modelet_pb2.LoadRequest | modelet_pb2.UpdateLoadedRequest | modelet_pb2.UnloadRequest,
        token: int,
        method: Callable[..., Awaitable[object]],
        timeout_s: float,
    ) -> tuple[ActionResult, Replica | None]:
        """Runs one Modelet call; returns its result and the replica's state after it (None: gone or unknown)."""
        name = request.model_name
        before = self.replicas.get(name) or Replica(ReplicaStatus.LOADING)
        try:
            await method(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            reason = exc.details() or exc.code().name
            if exc.code() in TRANSIENT_CODES:
                return ActionResult(self.address, name, kind, token, False, True, reason), None
            failed = (
                None
                if kind == "unload"
                else Replica(ReplicaStatus.FAILED, before.config_name, before.checkpoint, reason, role=before.role)
            )
            return ActionResult(self.address, name, kind, token, False, False, reason), failed
        after = (
            None
            if kind == "unload"
            else Replica(ReplicaStatus.LOADED, before.config_name, before.checkpoint, role=before.role)
        )
        return ActionResult(self.address, name, kind, token, True), after

    async def _work(self) -> None:
        while True:
            action = await self._queue.get()
            try:
                result, after = await action()
            except Exception:  # a bug here must not stop this server's queue
                log.exception("action on %s failed", self.address)
                continue
            left = self.pending.get(result.model, 1) - 1
            if left > 0:
                self.pending[result.model] = left  # a later queued action's prediction stands
            else:
                self.pending.pop(result.model, None)
                if after is None:
                    self.replicas.pop(result.model, None)
                else:
                    self.replicas[result.model] = after
            self.on_result(result)

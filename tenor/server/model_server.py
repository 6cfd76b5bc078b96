"""The model server process: joins a cell, loads what the admin assigns, serves it.

One gRPC port carries the Modelet service (the admin's) and the LM service (clients').
An optional HTTP port serves:
    GET /healthcheck          200 when every model held here is LOADED (and there is one), else 503
    GET /metrics              per-model status, queue, running, requests and latency percentiles
    /models/<model>/...       that model's own HTTP face (tenor.server.http.app.build_app):
                              /generate, /healthcheck, /metrics, /v1/completions, /v1/chat/completions,
                              /v1/models; <model> is the last part of /tenor/<cell>/<model>
Membership is a `JoinLoop` thread (tenor.server.join_loop): it joins at start, again when
the admin moves, and every few seconds, so a new admin adopts what is loaded here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import grpc
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tenor.auth.channels import CellAccess, CellCredentials, open_access
from tenor.dist.spec import GroupSpec
from tenor.engine.api import EngineUnavailableError, HealthState
from tenor.engine.options import EngineOptions
from tenor.errors import UserError
from tenor.proto import common_pb2, jetstream_pb2_grpc, lm_pb2_grpc, modelet_pb2_grpc
from tenor.server.http.connection_limits import ConnectionLimits
from tenor.server.lm_service import LMService
from tenor.server.modelet_service import ModeletService, ModelTable, Status, model_state
from tenor.server.orchestrator import jetstream_orchestrator

if TYPE_CHECKING:  # imported lazily at run time: they are heavy or only used on some paths
    import uvicorn
    from starlette.routing import BaseRoute

    from tenor.server.join_loop import JoinLoop

log = logging.getLogger(__name__)
PLATFORMS = ("cpu", "cuda")


@dataclass(frozen=True)
class ModelServerConfig:
    cell: str  # /tenor/<cell>
    root: str  # file://DIR or etcd://HOST:PORT[/prefix]
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    http_port: int | None = None  # None: no HTTP face; 0: any free port
    platform: str = "cpu"
    tags: tuple[str, ...] = ()
    memory_bytes: int = 0  # what models may fill; 0: this machine's RAM
    servable_configs: tuple[str, ...] = ()  # registry names offered; empty: all
    rejoin_s: float = 2.0
    drain_timeout_s: float = 5.0  # requests in flight get this long when a model is unloaded
    credentials: CellCredentials = field(default_factory=CellCredentials)
    http_limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    group: GroupSpec | None = None  # rank 0 of a model-server group: models are sharded over its ranks
    # Manual override of the admin's placement (tenor.disagg): every model not placed as "prefill"
    # decodes here, prefilling on these replicas, instead of on the model's prefill replicas.
    prefill_targets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.platform not in PLATFORMS:
            raise ValueError(f"platform must be one of {', '.join(PLATFORMS)}, got {self.platform!r}")
        for name, port in (("port", self.port), ("http_port", self.http_port)):
            if port is not None and not 0 <= port < 65536:
                raise ValueError(f"{name} must be in 0..65535, got {port}")
        if self.memory_bytes < 0:
            raise ValueError(f"memory_bytes must be >= 0, got {self.memory_bytes}")
        if self.rejoin_s <= 0 or self.drain_timeout_s < 0:
            raise ValueError("rejoin_s must be > 0 and drain_timeout_s >= 0")
        if any(not tag or "," in tag for tag in self.tags):
            raise ValueError(f"tags must be non-empty and without commas, got {list(self.tags)}")


def machine_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def bound_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket, so that port 0 becomes a known port before anyone serves on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def advertised(host: str, port: int) -> str:
    """The address others should dial: a wildcard bind is advertised by host name."""
    name = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"


class ModelServer:
    def __init__(self, config: ModelServerConfig, table: ModelTable | None = None) -> None:
        from tenor.disagg.roles import DecodeRole

        self.config = config
        # Dialled after start() has opened the cell access: prefill replicas check the cell token too.
        self._decode_role = DecodeRole(dial=lambda target, options: self._cell_access().channel(target, options))
        self._admin = None  # AdminClient for decode replicas' WatchLoc, made on the first decode load
        self.table = table or ModelTable(
            options=EngineOptions(device=config.platform),
            drain_timeout_s=config.drain_timeout_s,
            wrap_engine=self._take_role,
        )
        self.address = ""
        self.http_address = ""
        self._grpc: grpc.aio.Server | None = None
        self._http: uvicorn.Server | None = None
        self._http_task: asyncio.Task | None = None
        self._join: JoinLoop | None = None
        self.access: CellAccess | None = None

    def _take_role(self, name: str, engine, role: str):
        """The engine as the admin placed it: prefill (as is), decode (prefilling on the model's
        prefill replicas, found through the admin) or both (as is, unless --prefill-from)."""
        from tenor.admin.roles import DECODE, PREFILL
        from tenor.disagg.roles import check_prefill_engine

        if role == PREFILL:
            check_prefill_engine(name, engine)
            return engine
        if self.config.prefill_targets:
            targets = self.config.prefill_targets
            return self._decode_role.wrap(name, engine, lambda: targets, strict=role == DECODE)
        if role != DECODE:
            return engine
        from tenor.disagg.targets import PrefillTargets

        watching: list[PrefillTargets] = []  # filled once wrap has accepted the engine

        def stop_watching() -> None:
            for watch in watching:
                watch.close()

        wrapped = self._decode_role.wrap(
            name, engine, lambda: watching[0].addresses() if watching else [], on_stop=stop_watching
        )
        admin = self._admin_client()
        watching.append(PrefillTargets(name, lambda: admin))
        return wrapped

    def _admin_client(self):
        if self._admin is None:
            from tenor.client.admin_client import AdminClient

            self._admin = AdminClient(self.config.root, self.config.cell, access=self._cell_access())
        return self._admin

    def _cell_access(self) -> CellAccess:
        if self.access is None:
            raise EngineUnavailableError("the model server has not started")
        return self.access

    def _open_access(self) -> CellAccess:
        from tenor.admin.naming import parse_cell_name
        from tenor.admin.store import StoreError, open_store

        store = open_store(self.config.root, parse_cell_name(self.config.cell))
        try:
            return open_access(self.config.credentials, store, create=True)
        except StoreError as exc:
            raise UserError(str(exc)) from None

    async def start(self, join: bool = True) -> None:
        self.access = await asyncio.to_thread(self._open_access)
        self._grpc = self.access.server()  # every RPC here needs the cell token
        lm_pb2_grpc.add_LMServiceServicer_to_server(LMService(self.table), self._grpc)
        modelet_pb2_grpc.add_ModeletServicer_to_server(ModeletService(self.table), self._grpc)
        jetstream_pb2_grpc.add_OrchestratorServicer_to_server(jetstream_orchestrator(self.table), self._grpc)
        from tenor.disagg.roles import add_prefill_service

        self.kv_transfer_service = add_prefill_service(self._grpc, self.table)
        if self.config.port:
            bound_socket(self.config.host, self.config.port).close()  # a clear error for a taken port
        port = self.access.add_port(self._grpc, f"{self.config.host}:{self.config.port}")
        if port == 0:
            raise UserError(f"cannot listen on {self.config.host}:{self.config.port} (in use, or a bad address)")
        await self._grpc.start()
        self.address = advertised(self.config.host, port)
        if self.config.http_port is not None:
            await self._start_http()
        if join:
            self._start_join()

    def _start_join(self) -> None:
        from tenor.server.join_loop import JoinLoop

        spec = common_pb2.ServerSpec(
            platform=self.config.platform,
            memory_bytes=self.config.memory_bytes or machine_memory_bytes(),
            tags=list(self.config.tags),
            servable_configs=list(self.config.servable_configs),
            group_size=self.config.group.size if self.config.group else 1,
        )
        self._join = JoinLoop(
            self.config.root,
            self.config.cell,
            self.address,
            self.http_address,
            spec,
            rejoin_s=self.config.rejoin_s,
            access=self.access,
        ).start()

    async def _start_http(self) -> None:
        import uvicorn

        sock = bound_socket(self.config.host, self.config.http_port or 0)
        self.http_address = advertised(self.config.host, sock.getsockname()[1])
        from tenor.disagg.metrics import DisaggCollector
        from tenor.server.http.connection_limits import uvicorn_options

        face = build_face(self.table, self.config.http_limits.body_timeout_s)
        face.add_collector(DisaggCollector(self.kv_transfer_service, self._decode_role))
        config = uvicorn.Config(face, log_level="warning", lifespan="off", **uvicorn_options(self.config.http_limits))
        self._http = uvicorn.Server(config)
        self._http_task = asyncio.create_task(self._http.serve(sockets=[sock]))
        while not self._http.started and not self._http_task.done():
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Leaves the cell (stops joining), stops taking requests, drains and stops engines."""
        if self._join is not None:
            await asyncio.to_thread(self._join.stop)
        if self._http is not None and self._http_task is not None:
            self._http.should_exit = True
            await asyncio.wait({self._http_task}, timeout=5)
        await self.table.close()
        await self._decode_role.close()
        if self._admin is not None:
            self._admin.close()
        if self._grpc is not None:
            await self._grpc.stop(grace=1.0)
        if self.access is not None:
            self.access.tokens.stop()


class HttpFace:
    """The server's HTTP app: its own /healthcheck and /metrics, and each LOADED model's
    app (build_app) mounted at /models/<model>, re-synced with the table on every request."""

    def __init__(self, table: ModelTable, body_timeout_s: float = 30.0) -> None:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse, Response

        self._table = table
        self._body_timeout_s = body_timeout_s
        self._mounted: dict[str, tuple[object, Any]] = {}  # short name -> (engine, app)
        self._registry = CollectorRegistry(auto_describe=True)
        self._registry.register(_TableCollector(table))
        self.app = FastAPI(title="tenor model server")

        @self.app.get("/healthcheck")
        async def healthcheck() -> JSONResponse:
            models = {m.name: Status.Name(m.status) for m in table.models()}
            live = bool(models) and all(
                m.status == Status.LOADED and m.engine is not None and m.engine.health() is HealthState.READY
                for m in table.models()
            )
            body = {"is_live": live, "models": models}
            if any(m.engine is not None and m.engine.health() is HealthState.DEGRADED for m in table.models()):
                body["state"] = HealthState.DEGRADED.value  # a rank of this model-server group is missing
            return JSONResponse(body, status_code=200 if live else 503)

        @self.app.get("/metrics", include_in_schema=False)
        async def metrics() -> Response:
            return Response(generate_latest(self._registry), media_type=CONTENT_TYPE_LATEST)

        self._base_routes = list(self.app.router.routes)

    def add_collector(self, collector: Collector) -> None:
        self._registry.register(collector)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            self._sync()
        await self.app(scope, receive, send)

    def _sync(self) -> None:
        from starlette.routing import Mount

        from tenor.server.http.app import build_app

        loaded = {m.name.rsplit("/", 1)[-1]: m for m in self._table.models() if m.status == Status.LOADED and m.engine}
        changed = False
        for key in list(self._mounted):
            if key not in loaded or self._mounted[key][0] is not loaded[key].engine:
                del self._mounted[key]
                changed = True
        for key, model in loaded.items():
            if key not in self._mounted:
                assert model.engine is not None and model.servable is not None  # LOADED models have both
                app = build_app(
                    model.engine,
                    served_model_name=model.name,
                    tokenized=model.servable.tokenized,
                    accepts_text=model.servable.accepts_text,
                    body_timeout_s=self._body_timeout_s,
                )
                self._mounted[key] = (model.engine, app)
                changed = True
        if changed:
            mounts: list[BaseRoute] = [
                Mount(f"/models/{key}", app=app) for key, (_, app) in sorted(self._mounted.items())
            ]
            self.app.router.routes = self._base_routes + mounts


def build_face(table: ModelTable, body_timeout_s: float = 30.0) -> HttpFace:
    return HttpFace(table, body_timeout_s)


class _TableCollector(Collector):
    """Per-model gauges and counters, read from the table at scrape time."""

    def __init__(self, table: ModelTable) -> None:
        self._table = table

    def collect(self) -> Iterator[Metric]:
        status = GaugeMetricFamily(
            "tenor:model_status", "1 for the model's current status.", labels=["model", "status"]
        )
        queue = GaugeMetricFamily("tenor:model_queue_depth", "Requests waiting.", labels=["model"])
        running = GaugeMetricFamily("tenor:model_running", "Requests being decoded.", labels=["model"])
        latency = GaugeMetricFamily(
            "tenor:model_latency_ms", "Recent end-to-end gRPC request latency.", labels=["model", "quantile"]
        )
        ok = CounterMetricFamily("tenor:model_requests_ok", "gRPC requests answered.", labels=["model"])
        failed = CounterMetricFamily("tenor:model_requests_failed", "gRPC requests failed.", labels=["model"])
        for served in self._table.models():
            state = model_state(served)
            status.add_metric([served.name, Status.Name(state.status)], 1)
            queue.add_metric([served.name], state.queue_depth)
            running.add_metric([served.name], state.running)
            quantiles = (("0.5", state.latency_p50_ms), ("0.95", state.latency_p95_ms), ("0.99", state.latency_p99_ms))
            for q, value in quantiles:
                latency.add_metric([served.name, q], value)
            ok.add_metric([served.name], state.requests_ok)
            failed.add_metric([served.name], state.requests_failed)
        yield from (status, queue, running, latency, ok, failed)


def serve(config: ModelServerConfig) -> int:
    """Runs a model server until SIGTERM or SIGINT (0), or until its group loses a rank (1)."""
    return asyncio.run(_serve(config))


async def _serve(config: ModelServerConfig) -> int:
    leader = None
    if config.group is not None:  # form the group first: the cell hears of it only once whole
        from tenor.dist.group_server import form_group_table

        leader, table = await form_group_table(config)
        server = ModelServer(config, table)
    else:
        server = ModelServer(config)
    try:
        await server.start()
    except BaseException:
        await server.stop()  # a half-started server must not leave its port or threads behind
        raise
    http = f", http {server.http_address}" if server.http_address else ""
    print(f"model server for {config.cell} serving on {server.address}{http}", flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    log_task = asyncio.create_task(_log_changes(server.table))
    watch = None
    if leader is not None:
        from tenor.dist.group_server import watch_group

        watch = asyncio.create_task(watch_group(leader, stopped))
    await stopped.wait()
    log_task.cancel()
    await server.stop()  # leaves the cell, fails what is in flight, stops engines
    if leader is not None:
        await asyncio.to_thread(leader.stop)
        if leader.broken:
            return 1  # a rank was lost: the admin re-places the replica, LWS re-creates the group
    if watch is not None:
        watch.cancel()
    return 0


async def _log_changes(table: ModelTable, every_s: float = 0.2) -> None:
    """One log line per model status change (the admin's status page has the rest)."""
    seen: dict[str, int] = {}
    while True:
        now = {m.name: m.status for m in table.models()}
        for name, status in _changes(seen, now, table):
            log.info("%s %s", name, status)
        seen = now
        await asyncio.sleep(every_s)


def _changes(seen: dict[str, int], now: dict[str, int], table: ModelTable) -> Iterator[tuple[str, str]]:
    reasons = {m.name: m.failure_reason for m in table.models()}
    for name, status in sorted(now.items()):
        if seen.get(name) != status:
            reason = f": {reasons[name]}" if reasons.get(name) else ""
            yield name, Status.Name(status) + reason
    for name in sorted(set(seen) - set(now)):
        yield name, "UNLOADED"

"""The admin server process: a gRPC Admin service that campaigns for the cell's lead.

Every admin binds its port and serves at once; until it leads it answers UNAVAILABLE
(clients then re-read the root and go to the leader). On winning it loads the durable
state, publishes its location and starts a Manager; if it loses the lead it stops the
Manager and campaigns again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import socket
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable, TypeVar

import grpc

from tenor.admin import reports
from tenor.admin.address_book import BookClosed, ModelGone
from tenor.admin.election import Election
from tenor.admin.manager import (
    AlreadyExistsError,
    Manager,
    ManagerOptions,
    NotFoundError,
    NotLeaderError,
    NotReadyError,
)
from tenor.admin.naming import CellName, parse_model_name
from tenor.admin.roles import PREFILL
from tenor.admin.servers import ServerSpecView
from tenor.admin.status_page import StatusPage, render_html
from tenor.admin.store import AdminLocation, StoreError, open_store
from tenor.auth.channels import CellCredentials, open_access
from tenor.errors import UserError
from tenor.proto import admin_pb2, admin_pb2_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")

_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (AlreadyExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (NotReadyError, grpc.StatusCode.FAILED_PRECONDITION),
    (NotLeaderError, grpc.StatusCode.UNAVAILABLE),
    (UserError, grpc.StatusCode.INVALID_ARGUMENT),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
)


@dataclass(frozen=True)
class AdminServerOptions:
    cell: CellName
    root: str
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    http_port: int | None = 0  # status page; 0: any free port; None: no page
    election_retry_s: float = 0.5
    etcd_ttl_s: int | None = None
    manager: ManagerOptions = field(default_factory=ManagerOptions)
    credentials: CellCredentials = field(default_factory=CellCredentials)
    open_read_only: bool = False  # List, Stats, WatchLoc and WaitForReady answer callers without the token

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.http_port is not None and not 0 <= self.http_port < 65536:
            raise ValueError(f"http_port must be in 0..65535, got {self.http_port}")


# What --open-read-only opens: the verbs that only tell where models are. Mutations never open.
READ_ONLY_METHODS = frozenset(f"/tenor.admin.Admin/{m}" for m in ("List", "Stats", "WatchLoc", "WaitForReady"))


class AdminService(admin_pb2_grpc.AdminServicer):
    """Answers for the Manager while this admin leads; UNAVAILABLE otherwise."""

    def __init__(self) -> None:
        self.manager: Manager | None = None
        self.leader_address = ""  # for standbys' error messages

    async def _run(self, context: grpc.aio.ServicerContext, call: Callable[[Manager], Awaitable[T]]) -> T:
        manager = self.manager
        if manager is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this admin is a standby, not the leader")
            raise AssertionError("unreachable: context.abort raises")  # grpc's stubs say it returns None
        try:
            return await call(manager)
        except tuple(e for e, _ in _CODES) as exc:
            code = next(c for e, c in _CODES if isinstance(exc, e))
            await context.abort(code, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            raise AssertionError("unreachable: context.abort raises")

    async def Publish(self, request, context):
        async def call(m: Manager) -> admin_pb2.PublishResponse:
            spec = await m.publish(reports.spec_from_proto(request.model))
            return admin_pb2.PublishResponse(model=reports.spec_to_proto(spec))

        return await self._run(context, call)

    async def Update(self, request, context):
        async def call(m: Manager) -> admin_pb2.UpdateResponse:
            parse_model_name(request.model_name)
            spec = await m.update(
                request.model_name,
                request.replicas if request.HasField("replicas") else None,
                request.checkpoint if request.HasField("checkpoint") else None,
                dict(request.overrides),
            )
            return admin_pb2.UpdateResponse(model=reports.spec_to_proto(spec))

        return await self._run(context, call)

    async def Unpublish(self, request, context):
        async def call(m: Manager) -> admin_pb2.UnpublishResponse:
            parse_model_name(request.model_name)
            await m.unpublish(request.model_name)
            return admin_pb2.UnpublishResponse()

        return await self._run(context, call)

    async def List(self, request, context):
        async def call(m: Manager) -> admin_pb2.ListResponse:
            return reports.list_models(m, request.name)

        return await self._run(context, call)

    async def Stats(self, request, context):
        async def call(m: Manager) -> admin_pb2.StatsResponse:
            return reports.stats(m)

        return await self._run(context, call)

    async def WaitForReady(self, request, context):
        async def call(m: Manager) -> admin_pb2.WaitForReadyResponse:
            parse_model_name(request.model_name)
            try:
                current = await m.wait_for_ready(request.model_name, request.num_replicas)
            except ModelGone as exc:
                raise NotFoundError(str(exc)) from None
            except BookClosed as exc:
                raise NotLeaderError(str(exc)) from None
            return admin_pb2.WaitForReadyResponse(addresses=sorted(current.addresses + current.prefill))

        return await self._run(context, call)

    async def Join(self, request, context):
        async def call(m: Manager) -> admin_pb2.JoinResponse:
            await m.join(request.address, request.http_address, ServerSpecView.from_proto(request.spec))
            return admin_pb2.JoinResponse(admin_id=m.admin_id)

        return await self._run(context, call)

    async def WatchLoc(self, request, context) -> AsyncIterator[admin_pb2.WatchLocResponse]:
        manager = self.manager
        if manager is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this admin is a standby, not the leader")
            raise AssertionError("unreachable: context.abort raises")  # grpc's stubs say it returns None
        try:
            parse_model_name(request.model_name)
            if request.role not in ("", PREFILL):
                raise UserError(f'WatchLoc role must be "" (serving replicas) or "prefill", got {request.role!r}')
            manager.get(request.model_name)
        except NotFoundError as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except UserError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        previous: tuple[str, ...] | None = None
        try:
            async for current in manager.book.watch(request.model_name):
                # Ordinary clients get the replicas that take requests; decode replicas ask for "prefill".
                addresses = current.prefill if request.role == PREFILL else current.addresses
                if addresses == previous:
                    continue  # only the other role's set changed
                before = set(previous or ())
                yield admin_pb2.WatchLocResponse(
                    admin_id=manager.admin_id,
                    seqno=current.seqno,
                    reset=previous is None,
                    addresses=addresses,
                    added=sorted(set(addresses) - before),
                    removed=sorted(before - set(addresses)),
                )
                previous = addresses
        except ModelGone as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except BookClosed as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))


def _advertised_host(host: str) -> str:
    return socket.getfqdn() if host in ("", "0.0.0.0", "::", "[::]") else host


class AdminServer:
    """One admin process's life: serve, campaign, lead, and campaign again if the lead is lost."""

    def __init__(self, options: AdminServerOptions) -> None:
        self.options = options
        self.service = AdminService()
        self.store = open_store(options.root, options.cell, etcd_ttl_s=options.etcd_ttl_s)
        try:
            self.access = open_access(options.credentials, self.store, create=True)
        except StoreError as exc:
            raise UserError(str(exc)) from None
        self._server = self.access.server(READ_ONLY_METHODS if options.open_read_only else frozenset())
        admin_pb2_grpc.add_AdminServicer_to_server(self.service, self._server)
        self._page = StatusPage(self._render) if options.http_port is not None else None
        self._stopping = asyncio.Event()
        self.address = ""
        self.http_address = ""
        self.admin_id = ""
        self.role = "standby"

    async def _render(self) -> tuple[str, str]:
        manager = self.service.manager
        leader = ""
        if manager is None:
            try:
                location = await asyncio.to_thread(self.store.read_location)
                leader = location.address if location else "none yet"
            except StoreError as exc:
                leader = f"unknown ({exc})"
        manager = self.service.manager  # may have changed while reading the root
        page = render_html(
            str(self.options.cell),
            self.role,
            leader,
            reports.list_models(manager, "") if manager else None,
            reports.stats(manager) if manager else None,
        )
        return self.role, page

    async def start(self) -> None:
        await asyncio.to_thread(self.store.ensure_cell)
        bind = f"{self.options.host}:{self.options.port}"
        port = self.access.add_port(self._server, bind)
        if port == 0:
            raise UserError(f"cannot listen on {bind} (in use?)")
        await self._server.start()
        advertised = _advertised_host(self.options.host)
        self.address = f"{advertised}:{port}"
        self.admin_id = f"{self.address}_{secrets.token_hex(4)}"
        if self._page is not None:
            try:
                http_port = await self._page.start(self.options.host, self.options.http_port or 0)
            except OSError as exc:
                raise UserError(
                    f"cannot serve the status page on {self.options.host}:{self.options.http_port}: {exc.strerror}"
                ) from None
            self.http_address = f"{advertised}:{http_port}"

    async def run(self) -> None:
        location = AdminLocation(self.address, self.admin_id, self.http_address)
        election = Election(self.store, location, self.options.election_retry_s)
        while not self._stopping.is_set():
            leadership = await self._until_stopping(election.acquire())
            if leadership is None:
                return
            try:
                state = await asyncio.to_thread(self.store.load_state)
            except StoreError as exc:
                log.error("cannot read the cell state, stepping down: %s", exc)
                await asyncio.to_thread(leadership.release)
                await asyncio.sleep(self.options.election_retry_s)
                continue
            manager = Manager(
                self.store, leadership, self.admin_id, state, self.options.manager, dial=self.access.aio_channel
            )
            await manager.start()
            self.service.manager, self.role = manager, "leader"
            print(
                f"tenor admin: leading {self.options.cell} at {self.address} with {len(state.models)} "
                "published model(s)",
                flush=True,
            )
            reason = await self._until_stopping(election.hold(leadership, manager.lost))
            self.service.manager, self.role = None, "standby"
            await manager.stop()
            await asyncio.to_thread(leadership.release)
            if reason is not None:
                print(f"tenor admin: lost the lead of {self.options.cell} ({reason}); campaigning again", flush=True)

    async def _until_stopping(self, work: Awaitable[T]) -> T | None:
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None

    def request_stop(self) -> None:
        self._stopping.set()

    async def close(self) -> None:
        self._stopping.set()
        if self._page is not None:
            await self._page.stop()
        await self._server.stop(grace=1.0)
        self.access.tokens.stop()
        await asyncio.to_thread(self.store.close)


async def serve(options: AdminServerOptions) -> None:
    server = AdminServer(options)
    try:
        await server.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, server.request_stop)
        page = f", status page http://{server.http_address}/" if server.http_address else ""
        print(f"tenor admin: serving {options.cell} on {server.address}{page} (root {options.root})", flush=True)
        await server.run()
    finally:
        await server.close()

"""Runs one engine behind the HTTP app until SIGINT/SIGTERM, then drains and exits.

Order of events:
  1. bind the port (a port in use fails here, before any model is loaded);
  2. create the engine and `await engine.start()` (load, warm up);
  3. start uvicorn on the bound socket and print exactly one line,
     `tenor: serving <model> at http://HOST:PORT`, once it accepts connections;
  4. on the first SIGINT/SIGTERM: stop admitting (new requests and /healthcheck get 503,
     so load balancers move on), let in-flight requests finish for up to the drain
     timeout (`engine.stop(drain_timeout_s)` aborts what is left), close the listener,
     return 0. A second signal skips the rest of the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Iterator, TextIO

from tenor.engine.api import Engine, EngineUnavailableError
from tenor.errors import UserError
from tenor.server.http.connection_limits import ConnectionLimits

if TYPE_CHECKING:
    import grpc
    import uvicorn
    from fastapi import FastAPI

# After the engine drained, how long uvicorn may take to flush the last bytes and close.
# An engine that let requests run past its drain timeout has them cut off here.
CLOSE_GRACE_S = 2.0
SHUTDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000  # 0: any free port (the printed URL says which)
    api_key: str | None = None
    served_model_name: str | None = None
    drain_timeout_s: float = 10.0
    log_level: str = "warning"  # uvicorn's; "info" adds its access log
    grpc_port: int | None = None  # JetStream's gRPC Orchestrator here too (0: any free port)
    tokenized: bool = False  # the model reads and writes comma-separated token ids
    limits: ConnectionLimits = ConnectionLimits()
    accepts_text: bool = False  # a tokenized model that also reads text prompts

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("host must not be empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be between 0 and 65535, got {self.port}")
        if self.grpc_port is not None and not 0 <= self.grpc_port <= 65535:
            raise ValueError(f"gRPC port must be between 0 and 65535, got {self.grpc_port}")
        if not self.drain_timeout_s >= 0:
            raise ValueError(f"drain timeout must be >= 0 seconds, got {self.drain_timeout_s}")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api key must not be empty")


def run_server(
    engine_factory: Callable[[], Engine],
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    api_key: str | None = None,
    served_model_name: str | None = None,
    drain_timeout_s: float = 10.0,
    log_level: str = "warning",
    out: TextIO | None = None,
    grpc_port: int | None = None,
    tokenized: bool = False,
    limits: ConnectionLimits = ConnectionLimits(),
    accepts_text: bool = False,
) -> int:
    """Serves until SIGINT/SIGTERM; returns the exit status (0 after a clean drain).
    Raises UserError when the address cannot be bound."""
    options = ServeOptions(
        host, port, api_key, served_model_name, drain_timeout_s, log_level, grpc_port, tokenized, limits, accepts_text
    )
    sock = bind_socket(options.host, options.port)
    try:
        return asyncio.run(_serve(engine_factory, sock, options, out or sys.stdout))
    finally:
        sock.close()


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket; UserError with the reason when that fails."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    # Lets a restarted server reuse a port still in TIME_WAIT; a live listener still blocks it.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on {host} is already in use; pick another with --port") from None
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _ShutdownSignals:
    """The first SIGINT/SIGTERM asks for a drain; the second one for an end now."""

    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self.forced = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._installed: list[int] = []
        for sig in SHUTDOWN_SIGNALS:
            try:
                self._loop.add_signal_handler(sig, self._on_signal)
                self._installed.append(sig)
            except (RuntimeError, ValueError):
                pass  # not the main thread (embedded use): the caller stops us otherwise

    def _on_signal(self) -> None:
        (self.forced if self.requested.is_set() else self.requested).set()

    def remove(self) -> None:
        for sig in self._installed:
            self._loop.remove_signal_handler(sig)


def _http_server(app: FastAPI, options: ServeOptions, on_ready: Callable[[], None]) -> uvicorn.Server:
    """uvicorn serving `app`, minus its own signal handling (run_server drains first), plus a
    callback once it accepts connections."""
    import uvicorn

    from tenor.server.http.connection_limits import uvicorn_options

    class ReadyServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                on_ready()

    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level=options.log_level,
        access_log=options.log_level in ("info", "debug"),
        # uvicorn's annotation says int; it hands the value to asyncio.wait_for, which takes a float.
        timeout_graceful_shutdown=CLOSE_GRACE_S,  # type: ignore[arg-type]
        **uvicorn_options(options.limits),
    )
    return ReadyServer(config)


async def _start_grpc(app: FastAPI, options: ServeOptions) -> tuple[grpc.aio.Server, int]:
    from tenor.server.http.app import context_of
    from tenor.server.orchestrator import OrchestratorService, start_orchestrator
    from tenor.server.pipeline import RequestPipeline

    ctx = context_of(app)

    def pipeline() -> RequestPipeline:
        if ctx.draining:
            raise EngineUnavailableError("the server is shutting down; retry on another replica")
        return ctx.pipeline

    service = OrchestratorService(pipeline, ctx.health)
    assert options.grpc_port is not None
    return await start_orchestrator(service, options.host, options.grpc_port)


async def _serve(engine_factory: Callable[[], Engine], sock: socket.socket, options: ServeOptions, out: TextIO) -> int:
    async with contextlib.AsyncExitStack() as stack:
        return await _serve_in(engine_factory, sock, options, out, stack)


async def _serve_in(
    engine_factory: Callable[[], Engine],
    sock: socket.socket,
    options: ServeOptions,
    out: TextIO,
    stack: contextlib.AsyncExitStack,
) -> int:
    signals = _ShutdownSignals()
    try:
        engine = engine_factory()
        starting = asyncio.ensure_future(engine.start())
        await asyncio.sleep(0)  # start() hands the model's load to the engine's thread
        # The HTTP side's modules (FastAPI, pydantic, uvicorn: ~0.5 s) load here while that
        # thread loads the model, not before it.
        from tenor.server.http.app import begin_drain, build_app, context_of

        if not await _unless(signals.requested, starting):
            await engine.stop(0.0)  # asked to stop while loading
            return 0
        app = build_app(
            engine,
            served_model_name=options.served_model_name,
            api_key=options.api_key,
            tokenized=options.tokenized,
            accepts_text=options.accepts_text,
            body_timeout_s=options.limits.body_timeout_s,
        )
        url = url_of(sock, options.host)
        grpc_note = ""
        if options.grpc_port is not None:
            grpc_server, grpc_port = await _start_grpc(app, options)
            stack.push_async_callback(grpc_server.stop, CLOSE_GRACE_S)
            grpc_note = f" (JetStream gRPC on {options.host}:{grpc_port})"  # before " at URL": parsers split there

        runtime = engine.stats().runtime

        def announce() -> None:
            if runtime is not None:  # what precision was chosen and why, once serving for sure
                print(f"tenor: {runtime.describe()}", file=sys.stderr, flush=True)
            print(f"tenor: serving {context_of(app).model_name}{grpc_note} at {url}", file=out, flush=True)

        server = _http_server(app, options, announce)
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        if await _unless(signals.requested, asyncio.shield(serving)):
            await engine.stop(0.0)  # uvicorn ended by itself (it logged why)
            return 1
        begin_drain(app)
        if not await _unless(signals.forced, engine.stop(options.drain_timeout_s)):
            server.force_exit = True  # uvicorn then closes connections without waiting
            await engine.stop(0.0)
        server.should_exit = True
        await serving
        return 0
    finally:
        signals.remove()


async def _unless(event: asyncio.Event, work: Awaitable[object]) -> bool:
    """Runs `work` until it finishes (True) or `event` is set first (False, work cancelled)."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.create_task(event.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        task.result()  # re-raise what the work raised
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False

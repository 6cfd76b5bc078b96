"""Test helpers for the HTTP face: an in-process ASGI client, a real uvicorn server on a
thread, and a serving subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import subprocess
import threading
from typing import AsyncIterator

import httpx
import uvicorn

from tenor.engine.mock_engine import MockEngine
from tenor.server.http.app import build_app


@contextlib.asynccontextmanager
async def asgi_client(
    engine: MockEngine | None = None, *, start: bool = True, **app_kwargs: object
) -> AsyncIterator[tuple[httpx.AsyncClient, MockEngine]]:
    """An httpx client wired straight into the app (no sockets); the engine runs on this loop."""
    engine = engine or MockEngine()
    if start:
        await engine.start()
    app = build_app(engine, **app_kwargs)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://tenor.test") as client:
        yield client, engine
    await engine.stop()


class LiveServer:
    """build_app(engine) under a real uvicorn on 127.0.0.1:<free port>, on its own thread and loop.

    Use as a context manager. The engine lives on the server's loop; tests read its plain
    attributes (`aborted`, `stats()`) from the test thread, which is safe for reads.
    """

    def __init__(self, engine: MockEngine | None = None, **app_kwargs: object) -> None:
        self.engine = engine or MockEngine()
        self._app_kwargs = app_kwargs
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server: uvicorn.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> "LiveServer":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the test server did not start within 10 s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()

    async def _main(self) -> None:
        await self.engine.start()
        app = build_app(self.engine, **self._app_kwargs)  # type: ignore[arg-type]
        config = uvicorn.Config(app, lifespan="off", log_level="warning", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        serving = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started and not serving.done():
            await asyncio.sleep(0.01)
        self._ready.set()
        await serving
        await self.engine.stop()


class ServeProcess:
    """A `tenor serve`-like command in a subprocess: waits for its one ready line, and always
    kills it on exit. `url` comes from that line, so tests never guess the port."""

    READY_PREFIX = "tenor: serving "

    def __init__(self, argv: list[str], ready_timeout_s: float = 60.0) -> None:
        self.argv = argv
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[str] | None = None
        self.ready_line = ""
        self.url = ""

    def __enter__(self) -> "ServeProcess":
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        readable, _, _ = select.select([self.proc.stdout], [], [], self.ready_timeout_s)
        line = self.proc.stdout.readline() if readable else ""  # type: ignore[union-attr]
        if not line.startswith(self.READY_PREFIX):
            self.proc.kill()
            _, stderr = self.proc.communicate(timeout=10)
            raise RuntimeError(f"no ready line (got {line!r}); stderr:\n{stderr[-3000:]}")
        self.ready_line = line.rstrip("\n")
        self.url = self.ready_line.rsplit(" at ", 1)[1]
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout_s: float) -> tuple[int, str, str]:
        """Exit status and the rest of stdout and stderr."""
        assert self.proc is not None
        stdout, stderr = self.proc.communicate(timeout=timeout_s)
        return self.proc.returncode, stdout, stderr

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=10)

"""Test helpers for the HTTP face: an in-process ASGI client and a real uvicorn server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
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

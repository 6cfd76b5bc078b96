"""Fixtures for the benchmark tests: the scripted SSE server on a free loopback port, in a thread."""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import pytest
import uvicorn

from tests.bench.fake_sse_server import build_fake_app


@pytest.fixture(scope="module")
def fake_server_url() -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_fake_app(), log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the fake SSE server did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()

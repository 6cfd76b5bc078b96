"""Fixtures for the benchmark tests."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.bench.fake_sse_server import build_fake_app
from tests.bench.live import serve_app


@pytest.fixture(scope="module")
def fake_server_url() -> Iterator[str]:
    """The scripted SSE server (see fake_sse_server.py) on a free loopback port."""
    with serve_app(build_fake_app()) as url:
        yield url

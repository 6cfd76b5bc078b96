"""`tenor serve --tensor-parallel 2`: a real local group behind the HTTP API. Kill -9 the worker:
the leader notices within seconds, /healthcheck says `degraded` (503), new requests get 503
rather than hanging, and SIGTERM still ends the process cleanly with nothing left behind."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import httpx

from tests.fakes.cell import wait_until
from tests.server.http.live import ServeProcess


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_serve_with_two_ranks_degrades_when_a_worker_dies():
    argv = [
        sys.executable,
        "-m",
        "tenor.cli.main",
        "serve",
        "--model",
        "test.TinyLlamaRandom",
        # 0: the server picks its port and names it in the ready line. A port picked here
        # could be taken meanwhile by one of the group's own gloo connections.
        "--port",
        "0",
        "--tensor-parallel",
        "2",
    ]
    with ServeProcess(argv, ready_timeout_s=120) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/healthcheck").status_code == 200
        answer = client.post("/generate", json={"prompt": "hello", "max_tokens": 8})
        assert answer.status_code == 200 and answer.json()["response"]
        (worker,) = children(server.proc.pid)
        os.kill(worker, signal.SIGKILL)
        killed = time.monotonic()

        def degraded():
            health = client.get("/healthcheck")
            return health if health.status_code == 503 else None

        health = wait_until(degraded, 15, "the leader to notice")
        assert time.monotonic() - killed < 10
        assert health.json()["response"]["state"] == "degraded"
        refused = client.post("/generate", json={"prompt": "hello", "max_tokens": 8})
        assert refused.status_code == 503
        server.signal(signal.SIGTERM)
        code, _, _ = server.wait(30)
    assert code == 0 and children(server.proc.pid) == []

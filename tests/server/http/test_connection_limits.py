"""Connection limits on a real `run_server` process: slowloris heads and bodies are cut off
and their connections freed, the server answers others meanwhile, the connection cap and
the head-size cap refuse what is past them, idle keep-alive connections are closed."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import sys
import time
from typing import Iterator
from urllib.parse import urlparse

import httpx
import pytest

from tenor.server.http.connection_limits import ConnectionLimits
from tests.server.http.live import ServeProcess

SCRIPT = """
import json, sys
from tenor.engine.mock_engine import MockEngine
from tenor.server.http.connection_limits import ConnectionLimits
from tenor.server.serve import run_server
limits = ConnectionLimits(**json.loads(sys.argv[1]))
sys.exit(run_server(lambda: MockEngine(model_name="m"), port=0, drain_timeout_s=0, limits=limits))
"""
HEAD = b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@contextlib.contextmanager
def server(**limits: float) -> Iterator[tuple[str, int]]:
    with ServeProcess([sys.executable, "-c", SCRIPT, json.dumps(limits)]) as process:
        url = urlparse(process.url)
        yield process.url, url.port


def good_request(url: str) -> int:
    return httpx.post(f"{url}/generate", json={"prompt": "abc", "max_tokens": 2}, timeout=10).status_code


def closed_by_server(sock: socket.socket) -> bytes | None:
    """What the server sent before closing, or None while the connection is still open."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return None
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def wait_all_closed(socks: list[socket.socket], timeout_s: float = 30) -> list[bytes]:
    answers: dict[int, bytes] = {}
    deadline = time.monotonic() + timeout_s
    while len(answers) < len(socks) and time.monotonic() < deadline:
        for i, sock in enumerate(socks):
            if i not in answers:
                answer = closed_by_server(sock)
                if answer is not None:
                    answers[i] = answer
        time.sleep(0.05)
    assert len(answers) == len(socks), f"{len(socks) - len(answers)} connection(s) still held"
    return [answers[i] for i in range(len(socks))]


def connect(port: int, first_bytes: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if first_bytes:
        sock.sendall(first_bytes)
    return sock


def test_hundreds_of_half_sent_heads_and_bodies_are_freed_and_others_served() -> None:
    with server(header_timeout_s=1.0, body_timeout_s=1.0) as (url, port):
        heads = [connect(port, HEAD) for _ in range(250)]  # the head never ends
        silent = [connect(port) for _ in range(25)]  # connect, send nothing
        bodies = [connect(port, HEAD + b'Content-Length: 100\r\n\r\n{"prompt": ') for _ in range(25)]
        try:
            assert good_request(url) == 200  # answered while 300 connections hang
            head_answers = wait_all_closed(heads + silent)
            body_answers = wait_all_closed(bodies)
            assert all(a == b"" for a in head_answers)  # closed without a word: there was no request
            for answer in body_answers:
                status, _, rest = answer.partition(b"\r\n")
                assert status == b"HTTP/1.1 408 Request Timeout", answer[:200]
                assert json.loads(rest.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
            assert good_request(url) == 200
        finally:
            for sock in heads + silent + bodies:
                sock.close()


def test_past_the_connection_cap_new_connections_get_503_then_room_frees() -> None:
    with server(max_connections=20, header_timeout_s=30.0) as (url, port):
        held = [connect(port) for _ in range(20)]
        time.sleep(0.2)  # let the server accept them (order of accepts, not a timing assertion)
        extra = [connect(port) for _ in range(5)]
        try:
            answers = wait_all_closed(extra)
            assert all(a.startswith(b"HTTP/1.1 503") and b'"overloaded"' in a for a in answers)
        finally:
            for sock in held + extra:
                sock.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if good_request(url) == 200:
                    break
            time.sleep(0.1)
        assert good_request(url) == 200


def test_a_head_over_the_cap_is_a_400_and_the_server_goes_on() -> None:
    with server(max_header_bytes=2048) as (url, port):
        sock = connect(port, HEAD + b"X-Padding: " + b"a" * 4096 + b"\r\n\r\n")
        try:
            answer = wait_all_closed([sock])[0]
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 400")
        assert good_request(url) == 200


def test_an_idle_keep_alive_connection_is_closed() -> None:
    with server(keep_alive_timeout_s=0.5) as (url, port):
        body = b'{"prompt": "abc", "max_tokens": 1}'
        sock = connect(port, HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        try:
            answer = wait_all_closed([sock])[0]
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("header_timeout_s", 0, "header_timeout_s must be > 0"),
        ("max_connections", 0, "max_connections must be >= 1"),
        ("max_header_bytes", 100, "max_header_bytes must be in 1024..1048576"),
    ],
)
def test_bad_limits_are_refused(field, value, message) -> None:
    with pytest.raises(ValueError, match=message):
        ConnectionLimits(**{field: value})


def test_bad_limit_flags_are_one_line(capsys) -> None:
    from tenor.cli.main import main

    assert main(["serve", "--body-timeout", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "tenor: error: --body-timeout: body_timeout_s must be > 0 seconds, got 0.0\n"

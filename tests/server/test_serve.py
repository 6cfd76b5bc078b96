"""run_server in a real process (signals need one): ready line, drain on SIGTERM, exit 0."""

import json
import signal
import socket
import sys
import time

import httpx
import pytest

from tenor.errors import UserError
from tenor.server.serve import ServeOptions, bind_socket, url_of
from tests.server.http.live import ServeProcess

# argv: step delay (s), drain timeout (s)
SCRIPT = """
import sys
from tenor.engine.mock_engine import MockEngine
from tenor.server.serve import run_server
step_s, drain_s = float(sys.argv[1]), float(sys.argv[2])
sys.exit(run_server(lambda: MockEngine(model_name="m", step_delay_s=step_s), port=0, drain_timeout_s=drain_s))
"""


def mock_server(step_s: float, drain_s: float) -> ServeProcess:
    return ServeProcess([sys.executable, "-c", SCRIPT, str(step_s), str(drain_s)])


def poll_until(predicate, timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def is_draining(client: httpx.Client) -> bool:
    return client.get("/healthcheck").status_code == 503


def assert_aborted_or_cut(lines) -> None:
    """An engine that aborts what is left at its drain timeout ends the stream with an error
    line; one that does not (the mock) has its connections cut when the server closes."""
    try:
        rest = [json.loads(line) for line in lines if line]
    except httpx.RemoteProtocolError:
        return
    assert rest[-1]["error"]["code"] == "aborted"


def test_sigterm_drains_the_stream_in_flight_refuses_new_work_and_exits_0():
    with mock_server(step_s=0.02, drain_s=10) as server:
        assert server.ready_line == f"tenor: serving m at {server.url}"
        assert server.url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=server.url, timeout=10) as client, httpx.Client(base_url=server.url) as other:
            assert other.get("/healthcheck").json() == {"response": {"is_live": True}}
            body = {"prompt": "abc", "max_tokens": 60, "stream": True}  # about 1.2 s of decoding
            with client.stream("POST", "/generate", json=body) as response:
                lines = response.iter_lines()
                texts = [json.loads(next(lines))["text"]]
                server.signal(signal.SIGTERM)
                assert poll_until(lambda: is_draining(other))
                refused = other.post("/generate", json={"prompt": "abc", "max_tokens": 1})
                assert refused.status_code == 503
                assert refused.json()["error"]["code"] == "shutting_down"
                texts += [json.loads(line)["text"] for line in lines if line]
        assert len("".join(texts)) == 60  # the request in flight finished in full
        code, stdout, _ = server.wait(10)
    assert code == 0
    assert stdout == ""  # the ready line was the only line


def test_requests_past_the_drain_timeout_are_cut_and_the_server_still_exits_0():
    with mock_server(step_s=0.05, drain_s=0.3) as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            body = {"prompt": "abc", "max_tokens": 400, "stream": True}  # 20 s of decoding
            with client.stream("POST", "/generate", json=body) as response:
                lines = response.iter_lines()
                next(lines)
                started = time.monotonic()
                server.signal(signal.SIGTERM)
                assert_aborted_or_cut(lines)
        code, _, _ = server.wait(10)
        assert time.monotonic() - started < 8  # not the 20 s the request wanted
    assert code == 0


def test_a_second_signal_cuts_the_drain_short():
    with mock_server(step_s=0.05, drain_s=60) as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            with client.stream("POST", "/generate", json={"prompt": "abc", "max_tokens": 400, "stream": True}) as r:
                lines = r.iter_lines()
                next(lines)
                started = time.monotonic()
                server.signal(signal.SIGTERM)
                assert poll_until(lambda: is_draining(httpx.Client(base_url=server.url)))
                server.signal(signal.SIGINT)
                assert_aborted_or_cut(lines)
        code, _, _ = server.wait(10)
        assert time.monotonic() - started < 5
    assert code == 0


def test_a_port_in_use_is_a_user_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=f"port {port} on 127.0.0.1 is already in use"):
            bind_socket("127.0.0.1", port)


def test_an_unknown_host_is_a_user_error():
    with pytest.raises(UserError, match="cannot listen on no-such-host.invalid"):
        bind_socket("no-such-host.invalid", 0)


def test_urls_name_the_bound_port_and_bracket_ipv6():
    sock = bind_socket("127.0.0.1", 0)
    try:
        assert url_of(sock, "127.0.0.1") == f"http://127.0.0.1:{sock.getsockname()[1]}"
        assert url_of(sock, "::1").startswith("http://[::1]:")
    finally:
        sock.close()


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"port": 70000}, "port"),
        ({"drain_timeout_s": -1}, "drain"),
        ({"api_key": " "}, "api key"),
        ({"host": ""}, "host"),
    ],
)
def test_serve_options_are_checked(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        ServeOptions(**kwargs)

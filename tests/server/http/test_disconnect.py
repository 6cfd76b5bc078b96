"""A client that goes away must free its engine slot at once, through a real socket."""

import threading
import time

import httpx
import pytest

from tenor.engine.mock_engine import MockEngine
from tests.server.http.live import LiveServer

# 400 tokens at 10 ms each: a request left running would hold its slot for 4 s.
LONG = {"max_tokens": 400}
STEP_S = 0.01


def wait_for(predicate, timeout_s: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def server():
    with LiveServer(MockEngine(step_delay_s=STEP_S, max_running=1)) as live:
        yield live


@pytest.mark.parametrize(
    "path, body",
    [
        ("/generate", {"prompt": "abc", "stream": True, **LONG}),
        ("/v1/completions", {"prompt": "abc", "stream": True, **LONG}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "abc"}], "stream": True, **LONG}),
    ],
)
def test_closing_a_stream_aborts_the_request(server, path, body):
    with httpx.Client(base_url=server.url, timeout=5) as client:
        with client.stream("POST", path, json=body) as response:
            assert response.status_code == 200
            request_id = response.headers["x-request-id"]
            next(response.iter_lines())  # some output arrived: the request is running
        assert wait_for(lambda: request_id in server.engine.aborted), "the engine never heard the client left"
        assert server.engine.stats().num_running == 0
        # The slot is free again: the next request runs at once.
        assert client.post("/generate", json={"prompt": "abc", "max_tokens": 2}).json() == {"response": "de"}


def test_a_non_streaming_client_that_gives_up_aborts_the_request(server):
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json={"prompt": "abc", **LONG}, timeout=0.3)
    assert wait_for(lambda: len(server.engine.aborted) == 1)
    assert server.engine.stats().num_running == 0


def test_a_client_that_leaves_while_queued_leaves_the_queue(server):
    """The only slot is busy, so the second request waits; its client gives up before any token
    and must leave the queue while the first request still holds the slot."""

    def hold_the_slot() -> None:
        try:
            httpx.post(server.url + "/generate", json={"prompt": "abc", "max_tokens": 300}, timeout=1.5)
        except httpx.ReadTimeout:
            pass

    holder = threading.Thread(target=hold_the_slot)
    holder.start()
    try:
        assert wait_for(lambda: server.engine.stats().num_running == 1)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.url + "/generate", json={"prompt": "xyz", "stream": True, **LONG}, timeout=0.2)
        assert wait_for(lambda: server.engine.stats().num_waiting == 0, timeout_s=0.8)
        assert server.engine.stats().num_running == 1  # the holder is still decoding
        assert len(server.engine.aborted) == 1
    finally:
        holder.join(5)

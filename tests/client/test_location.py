"""Replica picking, retry with backoff within the deadline, and the location watcher, with fakes."""

from __future__ import annotations

import threading
import time
from collections import Counter

import grpc
import pytest

from tenor.client.location import (
    LocationWatcher,
    ModelNotFoundError,
    NoReplicaError,
    Replicas,
    RetryPolicy,
    call_with_retry,
)

MODEL = "/tenor/test/lm"


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Servers:
    """attempt(address, left): fails with a code for addresses in `failing`, else answers."""

    def __init__(self, failing: dict[str, grpc.StatusCode] | None = None) -> None:
        self.failing = failing or {}
        self.calls: list[str] = []

    def __call__(self, address: str, left: float) -> str:
        assert left > 0
        self.calls.append(address)
        if address in self.failing:
            raise FakeRpcError(self.failing[address], f"{address} says no")
        return f"answer from {address}"


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.CANCELLED,  # seen from a model server leaving the cell (see RETRYABLE_CODES)
    ],
)
def test_retryable_error_is_retried_on_the_other_replica(code):
    clock = FakeClock()
    calls = []

    def attempt(address, left):
        calls.append(address)
        if len(calls) == 1:
            raise FakeRpcError(code, "first one fails")
        return f"answer from {address}"

    answer = call_with_retry(MODEL, Replicas(["a:1", "b:1"]), attempt, clock.now + 5, RetryPolicy(), clock, clock.sleep)
    assert sorted(calls) == ["a:1", "b:1"]
    assert answer == f"answer from {calls[1]}"
    assert clock.sleeps == [0.01]


def test_non_retryable_error_is_raised_at_once():
    clock = FakeClock()
    servers = Servers({"a:1": grpc.StatusCode.INVALID_ARGUMENT})
    with pytest.raises(FakeRpcError) as failed:
        call_with_retry(MODEL, Replicas(["a:1"]), servers, clock.now + 5, RetryPolicy(), clock, clock.sleep)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert servers.calls == ["a:1"] and clock.sleeps == []


def test_backoff_grows_to_the_cap_and_stops_at_the_deadline():
    clock = FakeClock()
    start = clock.now
    servers = Servers({"a:1": grpc.StatusCode.UNAVAILABLE, "b:1": grpc.StatusCode.RESOURCE_EXHAUSTED})
    policy = RetryPolicy(initial_backoff_s=0.1, multiplier=2, max_backoff_s=0.4)
    with pytest.raises(NoReplicaError) as failed:
        call_with_retry(MODEL, Replicas(["a:1", "b:1"]), servers, start + 2, policy, clock, clock.sleep)
    assert clock.sleeps[:5] == [0.1, 0.2, 0.4, 0.4, 0.4]
    assert clock.now == pytest.approx(start + 2)
    assert "says no" in str(failed.value) and MODEL in str(failed.value)
    # Both replicas were tried in turn, never the same one twice in a row.
    assert all(x != y for x, y in zip(servers.calls, servers.calls[1:]))


def test_waits_for_a_replica_to_appear():
    replicas = Replicas()
    servers = Servers()
    threading.Timer(0.05, replicas.set, args=(["c:1"],)).start()
    answer = call_with_retry(MODEL, replicas, servers, time.monotonic() + 5)
    assert answer == "answer from c:1"


def test_no_replica_until_the_deadline_is_no_replica_error():
    with pytest.raises(NoReplicaError, match="no replica is serving yet"):
        call_with_retry(MODEL, Replicas(), Servers(), time.monotonic() + 0.05)


def test_unknown_model_fails_waiting_callers():
    replicas = Replicas()
    threading.Timer(0.05, replicas.fail, args=(ModelNotFoundError(f"{MODEL} is not published"),)).start()
    with pytest.raises(ModelNotFoundError, match="not published"):
        call_with_retry(MODEL, replicas, Servers(), time.monotonic() + 5)


def test_round_robin_spreads_calls_evenly():
    replicas = Replicas(["a:1", "b:1", "c:1"])
    servers = Servers()
    for _ in range(300):
        call_with_retry(MODEL, replicas, servers, time.monotonic() + 5)
    assert Counter(servers.calls) == {"a:1": 100, "b:1": 100, "c:1": 100}


def test_retry_policy_rejects_nonsense():
    with pytest.raises(ValueError, match="initial_backoff_s"):
        RetryPolicy(initial_backoff_s=0)
    with pytest.raises(ValueError, match="multiplier"):
        RetryPolicy(multiplier=0.5)


def test_watcher_follows_the_stream_and_keeps_addresses_while_the_admin_is_away():
    replicas = Replicas()
    streams = iter([["a:1", "b:1"], ["b:1"]])
    calls = []
    admin_back = threading.Event()

    def watch(model_name):
        calls.append(model_name)
        if len(calls) == 1:
            yield from streams
            raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "admin went away")
        admin_back.wait(5)
        yield ["b:1", "c:1"]

    watcher = LocationWatcher(MODEL, watch, replicas, retry_s=0.01).start()
    try:
        deadline = time.monotonic() + 5
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert replicas.addresses() == ("b:1",)  # kept through the admin's absence
        admin_back.set()
        while replicas.addresses() != ("b:1", "c:1") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert replicas.addresses() == ("b:1", "c:1")
        assert calls[:2] == [MODEL, MODEL]
    finally:
        watcher.stop()
        admin_back.set()


def test_watcher_reports_an_unpublished_model():
    replicas = Replicas(["a:1"])

    def watch(model_name):
        raise ModelNotFoundError(f"{model_name} is not published")
        yield []  # pragma: no cover

    watcher = LocationWatcher(MODEL, watch, replicas, retry_s=0.01).start()
    try:
        replicas.wait(5)
        with pytest.raises(ModelNotFoundError):
            replicas.pick()
    finally:
        watcher.stop()

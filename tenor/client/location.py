"""Where a model's replicas are, which one to call next, and retrying on another one.

A `LocationWatcher` keeps a `Replicas` set current from the admin's WatchLoc stream in a
background thread. While the admin is away (failover) it keeps the last known set, since
the model servers usually still serve. `call_with_retry` picks replicas round-robin and,
on UNAVAILABLE, RESOURCE_EXHAUSTED, NOT_FOUND or CANCELLED (a replica that just went away,
or one that is going), tries another one after a growing backoff, until the caller's deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Iterator, TypeVar

import grpc

from tenor.engine.api import EngineUnavailableError
from tenor.errors import UserError

if TYPE_CHECKING:
    from tenor.client.admin_client import LocationWatch

T = TypeVar("T")
log = logging.getLogger(__name__)

# CANCELLED: a model server leaving the cell answered a call in flight so when its group lost a
# rank (tests/integration/test_cell_group.py; which server path sends it is not pinned down: a
# plain grpc.aio stop answers UNAVAILABLE). The client never cancels a call it waits on here (a
# stream is retried only before its first message), so the cancel is the server's.
RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.CANCELLED,
    }
)


class ModelNotFoundError(UserError):
    """The admin does not know the model (it was never published, or was unpublished)."""


def addresses_from(watch: LocationWatch) -> Iterator[tuple[str, ...]]:
    """The address sets a WatchLoc stream sends, until it ends; an unknown model raises
    ModelNotFoundError. The stream is closed however the iteration ends."""
    from tenor.client.admin_client import AdminError

    try:
        for update in watch:
            yield update.addresses
    except AdminError as exc:
        if exc.code == grpc.StatusCode.NOT_FOUND:
            raise ModelNotFoundError(str(exc)) from None
        raise
    finally:
        watch.close()


class NoReplicaError(EngineUnavailableError):
    """No replica answered before the deadline; the message says what was last seen."""


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff between attempts; attempts stop at the caller's deadline, never earlier."""

    initial_backoff_s: float = 0.01
    multiplier: float = 1.5
    max_backoff_s: float = 0.5

    def __post_init__(self) -> None:
        if self.initial_backoff_s <= 0:
            raise ValueError(f"initial_backoff_s must be > 0, got {self.initial_backoff_s}")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if self.max_backoff_s < self.initial_backoff_s:
            raise ValueError("max_backoff_s must be >= initial_backoff_s")

    def backoffs(self) -> Iterator[float]:
        backoff = self.initial_backoff_s
        while True:
            yield backoff
            backoff = min(backoff * self.multiplier, self.max_backoff_s)


class Replicas:
    """The current addresses of one model's serving replicas, thread-safe."""

    def __init__(self, addresses: Iterable[str] = ()) -> None:
        self._cond = threading.Condition()
        self._addresses: tuple[str, ...] = tuple(sorted(set(addresses)))
        self._error: Exception | None = None
        self._turn = 0

    def set(self, addresses: Iterable[str]) -> None:
        with self._cond:
            self._addresses = tuple(sorted(set(addresses)))
            self._error = None
            self._cond.notify_all()

    def fail(self, error: Exception) -> None:
        """The model is gone: callers waiting for a replica get `error`."""
        with self._cond:
            self._addresses = ()
            self._error = error
            self._cond.notify_all()

    def addresses(self) -> tuple[str, ...]:
        with self._cond:
            return self._addresses

    def pick(self, avoid: Collection[str] = ()) -> str | None:
        """The next address round-robin, skipping `avoid` unless nothing else is left."""
        with self._cond:
            if self._error is not None and not self._addresses:
                raise self._error
            candidates = [a for a in self._addresses if a not in avoid] or list(self._addresses)
            if not candidates:
                return None
            self._turn += 1
            return candidates[self._turn % len(candidates)]

    def wait(self, timeout_s: float) -> None:
        """Waits until the set changes (or fails), at most timeout_s."""
        with self._cond:
            before = (self._addresses, self._error)
            self._cond.wait_for(lambda: (self._addresses, self._error) != before, timeout=max(timeout_s, 0))


def call_with_retry(
    model_name: str,
    replicas: Replicas,
    attempt: Callable[[str, float], T],
    deadline: float,
    policy: RetryPolicy = RetryPolicy(),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Calls attempt(address, seconds_left) until it returns, a non-retryable error, or the deadline.

    A replica that failed is avoided until every known replica has failed once.
    Raises NoReplicaError at the deadline (with the last error's message), or the attempt's
    own error if it is not retryable.
    """
    avoid: set[str] = set()
    last = "no replica is serving yet"
    for backoff in policy.backoffs():
        left = deadline - clock()
        if left <= 0:
            raise NoReplicaError(f"{model_name}: gave up at the deadline; last: {last}")
        address = replicas.pick(avoid)
        if address is None:
            replicas.wait(min(left, policy.max_backoff_s))
            continue
        try:
            return attempt(address, left)
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            if code not in RETRYABLE_CODES:
                raise
            assert code is not None  # None is not retryable
            last = f"{address}: {code.name} {exc.details() if callable(getattr(exc, 'details', None)) else ''}"
            avoid.add(address)
            if avoid >= set(replicas.addresses()):
                avoid.clear()
        sleep(max(0.0, min(backoff, deadline - clock())))
    raise AssertionError("backoffs() never ends")


WatchFn = Callable[[str], Iterator[Collection[str]]]


class LocationWatcher:
    """Keeps `replicas` current from `watch(model_name)`, an iterator of full address sets.

    `watch` is expected to follow admin changes itself or fail; on failure the watcher
    retries after `retry_s`, keeping the last known addresses meanwhile. A watch that
    raises ModelNotFoundError empties the set and fails waiting callers.
    """

    def __init__(self, model_name: str, watch: WatchFn, replicas: Replicas, retry_s: float = 0.5) -> None:
        self._model_name = model_name
        self._watch = watch
        self._replicas = replicas
        self._retry_s = retry_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch {model_name}", daemon=True)

    def start(self) -> "LocationWatcher":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                for addresses in self._watch(self._model_name):
                    if self._stopped.is_set():
                        return
                    self._replicas.set(addresses)
            except ModelNotFoundError as exc:
                self._replicas.fail(exc)
            except Exception as exc:  # the admin is away or failing over; keep the last addresses
                log.debug("watching %s: %s", self._model_name, exc)
            self._stopped.wait(self._retry_s)

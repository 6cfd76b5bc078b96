"""Talks to a cell's active admin: finds it through the cell root, follows it when it moves.

Every call re-reads the root after UNAVAILABLE (a dead or standby admin) and retries with
backoff until the caller's timeout, like SAX's admin client. Other gRPC errors are the
admin's answer and surface as AdminError with its one-line message.
"""

from __future__ import annotations

import builtins
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

import grpc

from tenor.admin.naming import CellName, parse_cell_name
from tenor.admin.store import AdminLocation, StoreError, open_store, resolve_root
from tenor.auth.channels import CellAccess, CellCredentials, open_access
from tenor.errors import UserError
from tenor.proto import admin_pb2, admin_pb2_grpc, common_pb2

__all__ = ["AdminClient", "AdminError", "AdminUnavailableError", "LocationUpdate", "LocationWatch", "resolve_root"]

# A frozen admin must not hold a short call forever: retry after this, maybe on a new leader.
_ATTEMPT_TIMEOUT_S = 5.0
_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 1.0
T = TypeVar("T")


class AdminError(UserError):
    """The admin refused a request (NOT_FOUND, INVALID_ARGUMENT, ALREADY_EXISTS, ...)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class AdminUnavailableError(AdminError):
    """No active admin answered within the timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, message)


class _Retry(Exception):
    """This attempt reached no leader; look the admin up again."""


@dataclass(frozen=True)
class LocationUpdate:
    """One WatchLoc message: the serving replica addresses of a model."""

    admin_id: str
    seqno: int
    reset: bool
    addresses: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]


class AdminClient:
    """Thread-safe. `cell` is "/tenor/<cell>"."""

    def __init__(
        self,
        root: str,
        cell: str | CellName,
        *,
        timeout_s: float = 30.0,
        credentials: CellCredentials = CellCredentials(),
        access: CellAccess | None = None,
    ) -> None:
        self.cell = cell if isinstance(cell, CellName) else parse_cell_name(cell)
        self.root = resolve_root(root)
        self.timeout_s = timeout_s
        self._store = open_store(self.root, self.cell)
        self._owns_access = access is None
        self.access = access or open_access(credentials, self._store)
        self._lock = threading.Lock()
        self._address = ""
        self._channel: grpc.Channel | None = None

    # --- finding the admin -------------------------------------------------------------

    def location(self) -> AdminLocation | None:
        """The active admin as the root records it (None before any admin started)."""
        return self._store.read_location()

    def _connect(self) -> grpc.Channel:
        """The channel to the active admin as last seen in the root (looked up again after _poison)."""
        with self._lock:
            if self._channel is None:
                try:
                    location = self._store.read_location()
                except StoreError as exc:
                    raise _Retry(str(exc)) from None
                if location is None:
                    raise _Retry(f"no admin server has started for {self.cell} in {self.root}")
                self._address = location.address
                self._channel = self.access.channel(location.address)
            return self._channel

    def _poison(self, channel: grpc.Channel | None) -> None:
        """Forgets `channel` after it failed; a channel another thread already replaced is left alone."""
        with self._lock:
            if channel is None or channel is not self._channel:
                return
            self._channel = None
        assert channel is not None  # checked above, under the lock
        channel.close()

    def _with_retries(self, attempt: Callable[[admin_pb2_grpc.AdminStub, float], T], timeout_s: float | None) -> T:
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        backoff = _BACKOFF_START_S
        last = "no attempt made"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AdminUnavailableError(f"no active admin for {self.cell} answered in time ({last})")
            channel = None
            try:
                channel = self._connect()
                return attempt(admin_pb2_grpc.AdminStub(channel), remaining)
            except _Retry as exc:
                last = str(exc)
            except grpc.RpcError as exc:
                code = exc.code()
                # CANCELLED: another thread closed the channel after it failed there; DEADLINE_EXCEEDED
                # with time left: one attempt's cap, e.g. a frozen admin.
                retryable = (
                    code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
                    or (code == grpc.StatusCode.DEADLINE_EXCEEDED and deadline - time.monotonic() > 0)
                    or (code == grpc.StatusCode.UNAUTHENTICATED and self.access.tokens.refreshed())
                )
                if not retryable:
                    raise self._refusal(code, exc.details() or code.name) from None
                last = f"{self._address}: {exc.details() or code.name}"
            self._poison(channel)
            time.sleep(max(0.0, min(backoff, deadline - time.monotonic())))
            backoff = min(backoff * 1.5, _BACKOFF_MAX_S)

    def _unary(self, method: str, request: object, timeout_s: float | None = None, *, long: bool = False) -> Any:
        def attempt(stub: admin_pb2_grpc.AdminStub, remaining: float) -> Any:
            return getattr(stub, method)(request, timeout=remaining if long else min(remaining, _ATTEMPT_TIMEOUT_S))

        return self._with_retries(attempt, timeout_s)

    def _refusal(self, code: grpc.StatusCode, details: str) -> AdminError:
        if code == grpc.StatusCode.UNAUTHENTICATED and self.access.tokens.sending() is None:
            where = self.access.tokens.description
            reason = self.access.tokens.last_error or "no token there"
            details = f"the admin wants the cell token and none was found in {where} ({reason})"
        return AdminError(code, details)

    # --- the Admin service -------------------------------------------------------------

    def publish(
        self,
        name: str,
        config_name: str,
        checkpoint: str | None,
        replicas: int,
        overrides: dict[str, str] | None = None,
    ) -> admin_pb2.Model:
        model = admin_pb2.Model(
            model_name=name,
            config_name=config_name,
            checkpoint=checkpoint or "",
            requested_replicas=replicas,
            overrides=overrides or {},
        )
        attempts = 0

        def attempt(stub: admin_pb2_grpc.AdminStub, remaining: float) -> admin_pb2.Model:
            nonlocal attempts
            attempts += 1
            return stub.Publish(admin_pb2.PublishRequest(model=model), timeout=min(remaining, _ATTEMPT_TIMEOUT_S)).model

        try:
            return self._with_retries(attempt, None)
        except AdminError as exc:
            # A retried Publish can meet its own first attempt, made durable by an admin that died
            # before answering; an identical stored spec then means the publish did happen.
            if exc.code != grpc.StatusCode.ALREADY_EXISTS or attempts < 2:
                raise
            stored = self.list(name)[0].model
            if (stored.config_name, stored.checkpoint, stored.requested_replicas, dict(stored.overrides)) != (
                model.config_name,
                model.checkpoint,
                model.requested_replicas,
                dict(model.overrides),
            ):
                raise
            return stored

    def update(
        self,
        name: str,
        *,
        replicas: int | None = None,
        checkpoint: str | None = None,
        overrides: dict[str, str] | None = None,
    ) -> admin_pb2.Model:
        """None leaves a field as it is; checkpoint "" sets it to None; an empty override value removes the key."""
        request = admin_pb2.UpdateRequest(model_name=name, overrides=overrides or {})
        if replicas is not None:
            request.replicas = replicas
        if checkpoint is not None:
            request.checkpoint = checkpoint
        return self._unary("Update", request).model

    def unpublish(self, name: str) -> None:
        self._unary("Unpublish", admin_pb2.UnpublishRequest(model_name=name))

    def list(self, name: str = "") -> list[admin_pb2.PublishedModel]:
        return list(self._unary("List", admin_pb2.ListRequest(name=name)).models)

    def stats(self) -> admin_pb2.StatsResponse:
        return self._unary("Stats", admin_pb2.StatsRequest())

    def wait_for_ready(self, name: str, num_replicas: int, timeout_s: float | None = None) -> builtins.list[str]:
        request = admin_pb2.WaitForReadyRequest(model_name=name, num_replicas=num_replicas)
        try:
            response = self._unary("WaitForReady", request, timeout_s, long=True)
        except AdminUnavailableError:
            raise AdminError(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{name} did not reach {num_replicas} ready replica(s) in time"
            ) from None
        return list(response.addresses)

    def join(self, address: str, http_address: str, spec: common_pb2.ServerSpec, timeout_s: float | None = None) -> str:
        request = admin_pb2.JoinRequest(address=address, http_address=http_address, spec=spec)
        return self._unary("Join", request, timeout_s).admin_id

    def watch_loc(self, name: str, role: str = "") -> "LocationWatch":
        """role "": the replicas that take requests; "prefill": the model's prefill replicas."""
        return LocationWatch(self, name, role)

    def close(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
        if self._owns_access:
            self.access.tokens.stop()
        self._store.close()


class LocationWatch:
    """Iterates a model's serving addresses, across admin changes, until `close()`.

    Raises AdminError(NOT_FOUND) when the model is unpublished. Each new stream (first one,
    or after the admin changed) starts with a `reset` update carrying the full set.
    """

    def __init__(self, client: AdminClient, name: str, role: str = "") -> None:
        self._client = client
        self._name = name
        self._role = role
        self._closed = threading.Event()
        self._call_lock = threading.Lock()
        self._call: grpc.Future | None = None

    def close(self) -> None:
        self._closed.set()
        with self._call_lock:
            if self._call is not None:
                self._call.cancel()

    def __iter__(self) -> Iterator[LocationUpdate]:
        backoff = _BACKOFF_START_S
        while not self._closed.is_set():
            channel = None
            try:
                channel = self._client._connect()
                call = admin_pb2_grpc.AdminStub(channel).WatchLoc(
                    admin_pb2.WatchLocRequest(model_name=self._name, role=self._role)
                )
                with self._call_lock:
                    self._call = call
                if self._closed.is_set():
                    call.cancel()
                for message in call:
                    backoff = _BACKOFF_START_S
                    yield LocationUpdate(
                        message.admin_id,
                        message.seqno,
                        message.reset,
                        tuple(message.addresses),
                        tuple(message.added),
                        tuple(message.removed),
                    )
            except _Retry:
                pass
            except grpc.RpcError as exc:
                if self._closed.is_set():
                    return
                # UNAVAILABLE: the admin died or stepped down; CANCELLED: its channel was closed by a
                # thread that saw it fail. Both mean: find the active admin again.
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                    raise self._client._refusal(exc.code(), exc.details() or exc.code().name) from None
            self._client._poison(channel)
            self._closed.wait(backoff)
            backoff = min(backoff * 1.5, _BACKOFF_MAX_S)

"""The Python client: `Model('/tenor/<cell>/<model>').lm().generate(...)`.

Like SAX's client, it calls model servers directly: the admin only says where the
replicas are (a background WatchLoc per model). Calls are balanced round-robin over the
serving replicas and retried on another one within the caller's deadline
(`tenor.client.location`). gRPC failures reach the caller as the engine contract's errors:
InvalidRequestError (bad input), OverloadedError, EngineUnavailableError / NoReplicaError,
ModelNotFoundError.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence, TypeVar

import grpc

from tenor.auth.channels import CellAccess, CellCredentials, open_access
from tenor.client.location import (
    LocationWatcher,
    ModelNotFoundError,
    Replicas,
    RetryPolicy,
    addresses_from,
    call_with_retry,
)
from tenor.engine.api import EngineError, EngineUnavailableError, InvalidRequestError, OverloadedError
from tenor.proto import lm_pb2, lm_pb2_grpc

if TYPE_CHECKING:  # imported lazily at run time (only a cell root needs them)
    from tenor.admin.store import CellStore
    from tenor.client.admin_client import AdminClient, LocationWatch

T = TypeVar("T")
ExtraValue = float | int | str


@dataclass(frozen=True)
class ClientOptions:
    timeout_s: float = 60.0  # per call, retries included (saxutil's default)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    root: str | None = None  # cell root; None: $TENOR_ROOT
    addresses: tuple[str, ...] = ()  # call these model servers directly, without the admin
    credentials: CellCredentials = field(default_factory=CellCredentials)  # default: the root's token

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


@dataclass(frozen=True)
class Sample:
    text: str
    score: float


@dataclass(frozen=True)
class StreamItem:
    """One sample's piece of a stream message: text so far = acc[:prefix_len] + text."""

    text: str
    prefix_len: int
    scores: tuple[float, ...]


def extra_inputs(extra: Mapping[str, ExtraValue] | None) -> lm_pb2.ExtraInputs:
    """Numbers go to `items`, strings to `strings` (saxutil's -extra rule)."""
    message = lm_pb2.ExtraInputs()
    for key, value in (extra or {}).items():
        if isinstance(value, str):
            message.strings[key] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            message.items[key] = float(value)
        else:
            raise InvalidRequestError(f"extra input {key} must be a number or a string, got {value!r}")
    return message


class _Channels:
    """One gRPC channel per model-server address, shared by every call."""

    def __init__(self, access: CellAccess) -> None:
        self._access = access
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}

    def stub(self, address: str) -> lm_pb2_grpc.LMServiceStub:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = self._access.channel(address)
        return lm_pb2_grpc.LMServiceStub(channel)

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()


class Model:
    """A published model. Watches its replicas from the first call until close()."""

    def __init__(self, name: str, options: ClientOptions = ClientOptions()) -> None:
        from tenor.admin.naming import parse_model_name

        self.name = str(parse_model_name(name))
        self.options = options
        self._replicas = Replicas(options.addresses)
        self._store, self._access = _open_access(self.name, options)
        self._channels = _Channels(self._access)
        self._watcher: LocationWatcher | None = None
        self._admin: AdminClient | None = None  # once watching
        self._location_watch: LocationWatch | None = None  # its LocationWatch, closed to end the watcher's stream
        self._lock = threading.Lock()

    def lm(self) -> "LanguageModel":
        return LanguageModel(self)

    def close(self) -> None:
        with self._lock:
            if self._watcher is not None:
                self._watcher.stop()
            if self._location_watch is not None:
                self._location_watch.close()
            if self._admin is not None:
                self._admin.close()
        self._channels.close()
        self._access.tokens.stop()
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, attempt: Callable[[lm_pb2_grpc.LMServiceStub, float], T], timeout_s: float | None) -> T:
        """attempt(stub, seconds_left) on a replica, retried on others within the deadline."""
        self._watch_once()
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.options.timeout_s)

        def on_replicas() -> T:
            return call_with_retry(
                self.name,
                self._replicas,
                lambda address, left: attempt(self._channels.stub(address), left),
                deadline,
                self.options.retry,
            )

        try:
            try:
                return on_replicas()
            except grpc.RpcError as exc:
                # Refused with a token that has just changed (a rotation): once more with the new one.
                code = exc.code() if callable(getattr(exc, "code", None)) else None
                if code != grpc.StatusCode.UNAUTHENTICATED or not self._access.tokens.refreshed():
                    raise
                return on_replicas()
        except grpc.RpcError as exc:
            raise rpc_error(exc) from None

    def _watch_once(self) -> None:
        if self.options.addresses:
            return
        with self._lock:
            if self._watcher is None:
                from tenor.admin.naming import parse_model_name
                from tenor.client.admin_client import AdminClient, resolve_root

                self._admin = AdminClient(
                    resolve_root(self.options.root), parse_model_name(self.name).cell_name, access=self._access
                )
                self._watcher = LocationWatcher(self.name, self._watch_addresses, self._replicas).start()

    def _watch_addresses(self, name: str) -> Iterator[tuple[str, ...]]:
        assert self._admin is not None
        watch = self._admin.watch_loc(name)
        with self._lock:
            self._location_watch = watch
        yield from addresses_from(watch)


def _open_access(name: str, options: ClientOptions) -> tuple[CellStore | None, CellAccess]:
    """The credential for this model's cell: from the root when there is one (proxy mode may have none)."""
    from tenor.admin.naming import parse_model_name
    from tenor.admin.store import ROOT_ENV, open_store, resolve_root

    root = options.root or os.environ.get(ROOT_ENV)
    store = None
    if root and options.credentials.from_root:
        store = open_store(resolve_root(root), parse_model_name(name).cell_name)
    return store, open_access(options.credentials, store)


def rpc_error(exc: grpc.RpcError) -> Exception:
    """The engine contract's error for a gRPC status, with the server's one-line message."""
    code = exc.code() if callable(getattr(exc, "code", None)) else grpc.StatusCode.UNKNOWN
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequestError(details)
    if code == grpc.StatusCode.NOT_FOUND:
        return ModelNotFoundError(details)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return OverloadedError(details)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return EngineUnavailableError(f"{code.name}: {details}")
    return EngineError(f"{code.name}: {details}")


class LanguageModel:
    """generate / generate_stream / score on a published language model."""

    def __init__(self, model: Model) -> None:
        self._model = model

    def generate(
        self, text: str, extra: Mapping[str, ExtraValue] | None = None, timeout_s: float | None = None
    ) -> list[Sample]:
        """Samples best score first."""
        request = lm_pb2.GenerateRequest(model_key=self._model.name, text=text, extra_inputs=extra_inputs(extra))
        reply = self._model.call(lambda stub, left: stub.Generate(request, timeout=left), timeout_s)
        return [Sample(t.text, t.score) for t in reply.texts]

    def score(
        self,
        prefix: str,
        suffixes: Sequence[str],
        extra: Mapping[str, ExtraValue] | None = None,
        timeout_s: float | None = None,
    ) -> list[float]:
        """log P(suffix | prefix) for each suffix."""
        request = lm_pb2.ScoreRequest(
            model_key=self._model.name, prefix=prefix, suffix=list(suffixes), extra_inputs=extra_inputs(extra)
        )
        reply = self._model.call(lambda stub, left: stub.Score(request, timeout=left), timeout_s)
        return list(reply.logp)

    def generate_stream(
        self, text: str, extra: Mapping[str, ExtraValue] | None = None, timeout_s: float | None = None
    ) -> Iterator[list[StreamItem]]:
        """Stream messages, one StreamItem per sample each. Retried only before the first message:
        after that a failure is raised, since the caller has already seen part of the answer."""
        request = lm_pb2.GenerateRequest(model_key=self._model.name, text=text, extra_inputs=extra_inputs(extra))

        def first_message(stub: lm_pb2_grpc.LMServiceStub, left: float):
            call = stub.GenerateStream(request, timeout=left)
            return next(call, None), call

        first, call = self._model.call(first_message, timeout_s)
        try:
            if first is not None:
                yield _items(first)
            for message in call:
                yield _items(message)
        except grpc.RpcError as exc:
            raise rpc_error(exc) from None
        finally:
            call.cancel()


def _items(message: lm_pb2.GenerateStreamResponse) -> list[StreamItem]:
    return [StreamItem(item.text, item.prefix_len, tuple(item.scores)) for item in message.items]

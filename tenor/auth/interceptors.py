"""The token on the wire: `authorization: Bearer <token>` metadata on every call.

Servers check it in one interceptor before any handler runs (so no RPC can forget to);
clients add it in one interceptor per channel, reading the current token at each call so
that a rotation takes effect on live channels.
"""

from __future__ import annotations

import collections
from typing import Awaitable, Callable, Iterable

import grpc

from tenor.auth.tokens import TokenSource

REFUSED = "missing or wrong cell token: pass --token-file or TENOR_TOKEN, or read the cell root's token"


def bearer(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


def _refusal(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that answers UNAUTHENTICATED."""

    async def refuse(request: object, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)

    codec = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, **codec)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, **codec)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse, **codec)
    return grpc.unary_unary_rpc_method_handler(refuse, **codec)


class TokenCheck(grpc.aio.ServerInterceptor):
    """Refuses every call without an accepted token, except the methods in `open_methods`
    (full names, "/tenor.admin.Admin/List"), which an operator opened on purpose."""

    def __init__(self, tokens: TokenSource, open_methods: frozenset[str] = frozenset()) -> None:
        self._tokens = tokens
        self._open = open_methods

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method in self._open:
            return handler
        if self._tokens.accepts(bearer(details.invocation_metadata)):
            return handler
        return _refusal(handler)


class _Details(
    collections.namedtuple(
        "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


def _with_token(metadata: Iterable[tuple[str, str]] | None, token: str | None) -> list[tuple[str, str]]:
    kept = [(k, v) for k, v in (metadata or ()) if k != "authorization"]
    return kept + [("authorization", f"Bearer {token}")] if token else kept


class BearerToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """For `grpc.intercept_channel` (synchronous channels)."""

    def __init__(self, tokens: TokenSource) -> None:
        self._tokens = tokens

    def _details(self, details: grpc.ClientCallDetails) -> _Details:
        return _Details(
            details.method,
            details.timeout,
            _with_token(details.metadata, self._tokens.sending()),
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


class _AioBearer:
    def __init__(self, tokens: TokenSource) -> None:
        self._tokens = tokens

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        return grpc.aio.ClientCallDetails(
            details.method,
            details.timeout,
            grpc.aio.Metadata(*_with_token(details.metadata, self._tokens.sending())),
            details.credentials,
            details.wait_for_ready,
        )


class AioBearerUnary(_AioBearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._details(details), request)


class AioBearerStream(_AioBearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(self._details(details), request)


def aio_bearer(tokens: TokenSource) -> list[grpc.aio.ClientInterceptor]:
    return [AioBearerUnary(tokens), AioBearerStream(tokens)]

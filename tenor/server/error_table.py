"""One error taxonomy for every serving surface: each error the pipeline or the engine can
raise has one HTTP status, one gRPC code and one machine-readable code string.

HTTP (tenor.server.http.errors) and gRPC (tenor.server.lm_service, the JetStream
Orchestrator) both look errors up here, so a bad request is a 400 and INVALID_ARGUMENT
everywhere, an overloaded engine a 429 and RESOURCE_EXHAUSTED, and so on.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from tenor.engine.api import (
    EngineUnavailableError,
    InvalidRequestError,
    OverloadedError,
)
from tenor.errors import UserError


class ModelNotServedError(Exception):
    """This server has no such model (HTTP 404, gRPC NOT_FOUND): ask the admin again."""


@dataclass(frozen=True)
class ErrorKind:
    http_status: int
    grpc_code: grpc.StatusCode
    code: str  # OpenAI-style error code string

    @property
    def internal(self) -> bool:
        """A server fault: its details go to the server's log, not to the client."""
        return self.http_status == 500


INTERNAL = ErrorKind(500, grpc.StatusCode.INTERNAL, "internal_error")

# First match wins; the order matters where classes overlap (InvalidRequestError is a ValueError).
TABLE: tuple[tuple[type[BaseException], ErrorKind], ...] = (
    (ModelNotServedError, ErrorKind(404, grpc.StatusCode.NOT_FOUND, "model_not_found")),
    (InvalidRequestError, ErrorKind(400, grpc.StatusCode.INVALID_ARGUMENT, "invalid_value")),
    (UserError, ErrorKind(400, grpc.StatusCode.INVALID_ARGUMENT, "invalid_value")),
    (OverloadedError, ErrorKind(429, grpc.StatusCode.RESOURCE_EXHAUSTED, "overloaded")),
    (EngineUnavailableError, ErrorKind(503, grpc.StatusCode.UNAVAILABLE, "engine_unavailable")),
)


def classify(exc: BaseException) -> ErrorKind:
    """The kind of `exc`; anything the table does not name is an internal error."""
    for error_class, kind in TABLE:
        if isinstance(exc, error_class):
            return kind
    return INTERNAL


def client_message(exc: BaseException) -> str:
    """What the client reads: the first line of a known error; nothing of an internal one."""
    if classify(exc).internal:
        return "internal server error"
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__

"""Limits on HTTP connections, so that slow or idle clients cannot wedge a server.

uvicorn alone closes an idle keep-alive connection, but holds a connection that sends half a
request head (slowloris) forever, and has no cap on connections. `protocol_for(limits)` is
uvicorn's h11 protocol plus:

- a head deadline: the request line and headers must arrive within `header_timeout_s` of the
  connection opening (or of their first byte on a kept-alive connection), else it is closed;
- a connection cap: past `max_connections` a new connection gets `503` and is closed at once;
- a head size cap (`max_header_bytes`, h11's incomplete-event limit): larger heads get 400.

The body deadline lives in the app (tenor.server.http.body_timeout), which can answer 408.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

_BUSY_BODY = (
    b'{"error": {"message": "too many open connections", "type": "server_error", "param": null, "code": "overloaded"}}'
)
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0  # request line + headers
    body_timeout_s: float = 30.0  # the whole body, once the head arrived
    keep_alive_timeout_s: float = 5.0  # idle between requests on one connection
    max_connections: int = 1024
    max_header_bytes: int = 16 * 1024

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")
        if not 1024 <= self.max_header_bytes <= 1024 * 1024:
            raise ValueError(f"max_header_bytes must be in 1024..1048576, got {self.max_header_bytes}")


def protocol_for(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    # Imported here, not with the module: the CLI reads ConnectionLimits to parse its flags.
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class LimitedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                log.warning(
                    "refusing a connection: %d open (cap %d)", len(self.connections) - 1, limits.max_connections
                )
                transport.write(_BUSY)
                transport.close()
                return
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:
                self._arm_head_timer()  # a head has begun (or a kept-alive connection's next one)
            else:
                self._disarm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_timer()
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            if self._head_timer is None and not self.transport.is_closing():
                self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_timed_out)

        def _disarm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return LimitedH11Protocol


def uvicorn_options(limits: ConnectionLimits) -> dict[str, Any]:
    """Keyword arguments for uvicorn.Config that apply `limits`."""
    return {
        "http": protocol_for(limits),
        "timeout_keep_alive": limits.keep_alive_timeout_s,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
    }

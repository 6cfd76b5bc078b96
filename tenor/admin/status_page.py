"""The admin's status page: a plain HTML view of models, replicas and servers for a browser
(`/`), and `/healthz` (200 "leader" or "standby"). A tiny HTTP/1.1 responder on asyncio
streams: the page is read-only and small, and this keeps the admin free of a web stack."""

from __future__ import annotations

import asyncio
import html
import logging
from typing import Awaitable, Callable

from tenor.proto import admin_pb2, common_pb2

log = logging.getLogger(__name__)

_STATUS_NAMES = {v: k for k, v in common_pb2.ModelStatus.items()}


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def render_html(
    cell: str, role: str, leader: str, models: admin_pb2.ListResponse | None, stats: admin_pb2.StatsResponse | None
) -> str:
    parts = [f"<h1>tenor cell {html.escape(cell)}</h1>", f"<p>This admin is the <b>{html.escape(role)}</b>."]
    if leader:
        parts.append(f" Active admin: {html.escape(leader)}.")
    parts.append("</p>")
    if models is not None:
        rows = []
        for m in models.models:
            # An interleaved replica's role ("both") goes unsaid; prefill and decode are named.
            replicas = (
                ", ".join(
                    f"{r.address} ({_STATUS_NAMES[r.status]}" + (f", {r.role})" if r.role and r.role != "both" else ")")
                    for r in m.replicas
                )
                or "-"
            )
            notes = "; ".join(x for x in (m.shortfall, m.failure_reason, "gave up" if m.gave_up else "") if x)
            rows.append(
                [
                    m.model.model_name,
                    m.model.config_name,
                    m.model.checkpoint or "None",
                    f"{len(m.addresses)}/{m.model.requested_replicas}",
                    replicas,
                    notes,
                ]
            )
        parts += [
            "<h2>Models</h2>",
            _table(["model", "config", "checkpoint", "serving/requested", "replicas", "notes"], rows),
        ]
    if stats is not None:
        rows = []
        for s in stats.servers:
            models_here = (
                ", ".join(
                    f"{m.model_name} ({_STATUS_NAMES[m.status]}, queue {m.queue_depth}, p50 {m.latency_p50_ms:.0f} ms)"
                    for m in s.models
                )
                or "-"
            )
            rows.append(
                [
                    s.address,
                    s.http_address or "-",
                    s.spec.platform,
                    ",".join(s.spec.tags) or "-",
                    "healthy" if s.healthy else f"missed heartbeats for {s.last_seen_age_s:.1f}s",
                    f"{_size(s.memory_used_bytes)} of {_size(s.spec.memory_bytes)}",
                    str(s.queue_depth),
                    models_here,
                ]
            )
        parts += [
            "<h2>Model servers</h2>",
            _table(["address", "http", "platform", "tags", "health", "memory", "queue", "models"], rows),
        ]
    style = "table{border-collapse:collapse}td,th{border:1px solid #999;padding:2px 6px;text-align:left}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>tenor {html.escape(cell)}</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>"
    )


class StatusPage:
    """Serves `render()`'s page. `render` returns (role, html)."""

    def __init__(self, render: Callable[[], Awaitable[tuple[str, str]]]) -> None:
        self._render = render
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, host, port)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass  # headers are not needed
            parts = request_line.decode("latin-1").split()
            status, content_type, body = await self._respond(parts)
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError, UnicodeError):
            pass
        finally:
            writer.close()

    async def _respond(self, parts: list[str]) -> tuple[str, str, bytes]:
        if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET\n"
        path = parts[1].split("?", 1)[0]
        try:
            role, page = await self._render()
        except Exception as exc:  # the page must never take the admin down
            log.exception("status page failed")
            return "500 Internal Server Error", "text/plain", f"{exc}\n".encode()
        if path == "/healthz":
            return "200 OK", "text/plain", f"{role}\n".encode()
        if path == "/":
            return "200 OK", "text/html; charset=utf-8", page.encode()
        return "404 Not Found", "text/plain", b"not found; try /\n"

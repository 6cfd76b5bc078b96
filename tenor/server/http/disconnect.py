"""Notices a client that went away while its handler still waits on the engine.

Starlette stops a *streaming* body when the client disconnects, but a handler that is
still waiting (for a whole non-streamed answer, or for the first token before a stream
starts) is not told. Racing the work against the ASGI `http.disconnect` message cancels
it, which closes the engine iterator and frees the slot.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

from starlette.requests import Request

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was ready."""


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Awaits `work`; if the client disconnects first, cancels it and raises ClientDisconnected."""
    work_task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(_wait_for_disconnect(request))
    try:
        done, _ = await asyncio.wait({work_task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if work_task in done:
            return work_task.result()
        work_task.cancel()
        try:
            await work_task
        except asyncio.CancelledError:
            pass
        raise ClientDisconnected()
    finally:
        watcher.cancel()
        if not work_task.done():
            work_task.cancel()  # we ourselves were cancelled (server shutdown)


async def _wait_for_disconnect(request: Request) -> None:
    # The body has been read by now, so the next message can only be the disconnect
    # (servers also send it once the response is complete, by which time we are gone).
    while (await request.receive())["type"] != "http.disconnect":
        pass

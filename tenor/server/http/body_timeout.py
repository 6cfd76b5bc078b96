"""A deadline on reading a request body: 408 `request_timeout` when it is not all there in time.

The deadline starts at the first read of the body (the head has arrived by then). On expiry
the client gets the 408 and the app sees a disconnect, so whatever it answers next is dropped.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenor.server.http.errors import ApiError


class BodyTimeout:
    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        if not timeout_s > 0:
            raise ValueError(f"body timeout must be > 0 seconds, got {timeout_s}")
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline: float | None = None
        body_done = False
        timed_out = False
        started = False

        async def timed_receive() -> Message:
            nonlocal deadline, body_done, timed_out
            if body_done or timed_out:
                return await receive() if not timed_out else {"type": "http.disconnect"}
            deadline = deadline or time.monotonic() + self.timeout_s
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                timed_out = True
                if not started:
                    error = ApiError(
                        408,
                        f"the request body did not arrive within {self.timeout_s:g} s",
                        "request_timeout",
                        headers={"Connection": "close"},
                    )
                    await error.response()(scope, receive, send)
                return {"type": "http.disconnect"}
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if timed_out:
                return  # the 408 went out; the app's own answer to the "disconnect" is dropped
            started = True
            await send(message)

        await self.app(scope, timed_receive, guarded_send)

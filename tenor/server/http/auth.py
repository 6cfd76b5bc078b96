"""The optional API key: `Authorization: Bearer KEY` on the inference endpoints.

/healthcheck and /metrics stay open so that probes and scrapers need no secret.
"""

from __future__ import annotations

import hmac

from starlette.requests import Request

from tenor.server.http.errors import ApiError


class ApiKeyGuard:
    """A FastAPI dependency; with no key configured it lets everything through."""

    def __init__(self, api_key: str | None) -> None:
        if api_key is not None and not api_key.strip():
            raise ValueError("api_key must not be empty or blank; pass None to serve without a key")
        self._key = api_key.encode() if api_key is not None else None

    @property
    def enabled(self) -> bool:
        return self._key is not None

    async def __call__(self, request: Request) -> None:
        if self._key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        # compare_digest: the time taken must not reveal how much of the key matched.
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self._key):
            raise ApiError(
                401,
                "missing or invalid API key; send the header 'Authorization: Bearer <key>'",
                "invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

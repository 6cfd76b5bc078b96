"""One error shape for every HTTP endpoint, OpenAI's:

    {"error": {"message": str, "type": str, "param": str | null, "code": str}}

`type` is OpenAI's coarse class (invalid_request_error, rate_limit_error, server_error),
`code` is always a machine-readable string (model_not_found, invalid_value, ...): the HTTP
status already travels in the status line. JetStream's /generate answers in the same shape
so that a client needs one error parser for the whole server.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tenor.engine.api import EngineError, OverloadedError
from tenor.server.error_table import classify, client_message

log = logging.getLogger(__name__)

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}
STATUS_CODES = {  # the code for statuses that Starlette raises by itself
    400: "invalid_json",  # FastAPI's "There was an error parsing the body"
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
}


@dataclass
class ApiError(Exception):
    """An error the client should see as-is."""

    status: int
    message: str
    code: str
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @property
    def body(self) -> dict[str, dict[str, str | None]]:
        error_type = ERROR_TYPES.get(self.status, "server_error" if self.status >= 500 else "invalid_request_error")
        return {"error": {"message": self.message, "type": error_type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body, status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, code, param)


def from_engine_error(exc: Exception) -> ApiError:
    """Maps errors onto HTTP statuses through the one error table; anything it does not
    know is a 500 whose details stay in the server's log, not in the client's hands."""
    if isinstance(exc, ApiError):
        return exc
    kind = classify(exc)
    headers = {}
    if isinstance(exc, OverloadedError):
        # Retry-After takes whole seconds; rounding down to 0 would invite a busy loop.
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    return ApiError(kind.http_status, client_message(exc), kind.code, headers=headers)


def from_validation_error(exc: RequestValidationError) -> ApiError:
    """FastAPI's 422 list of pydantic errors becomes one 400 naming the first bad field."""
    errors = exc.errors()
    if not errors:
        return bad_request("invalid request body")
    first = errors[0]
    if first.get("type") == "json_invalid":
        detail = first.get("ctx", {}).get("error", "")
        return bad_request(f"the request body is not valid JSON: {detail}", code="invalid_json")
    location = [str(part) for part in first.get("loc", ()) if part != "body"]
    if not location:
        if isinstance(first.get("input"), bytes):  # FastAPI's raw bytes: the Content-Type is not JSON
            return bad_request(
                "the request body must be JSON sent with Content-Type: application/json", code="invalid_json"
            )
        return bad_request("the request body must be a JSON object")
    param = _param_name(first.get("loc", ()))
    if first.get("type") == "missing":
        return bad_request(f"missing required parameter '{param}'", param, code="missing_required_parameter")
    if first.get("type") == "extra_forbidden":
        return bad_request(f"unrecognized parameter '{param}'", param, code="unknown_parameter")
    return bad_request(f"invalid value for '{param}': {first.get('msg', 'invalid')}", param)


def _param_name(loc: tuple[object, ...] | list[object]) -> str:
    """('body', 'messages', 0, 'content') -> 'messages[0].content'."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        elif part == "body" or _is_union_tag(str(part)):
            continue
        else:
            name += f".{part}" if name else str(part)
    return name or "body"


def _is_union_tag(part: str) -> bool:
    """pydantic names the union member that failed ('str', 'list[int]', 'function-after[...]')."""
    return part in {"str", "int", "float", "bool"} or "[" in part


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves the server in the shape above, including FastAPI's own."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        if exc.status == 500:  # every 500 reaches the server's log with its traceback
            cause = exc.__cause__ or exc
            log.error(
                "%s %s failed", request.method, request.url.path, exc_info=(type(cause), cause, cause.__traceback__)
            )
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return from_validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Every code is one the README's table lists: other 4xx are "bad_request", 5xx "internal_error".
        fallback = "internal_error" if exc.status_code >= 500 else "bad_request"
        code = STATUS_CODES.get(exc.status_code, fallback)
        error = ApiError(exc.status_code, str(exc.detail), code, headers=dict(exc.headers or {}))
        return error.response()

    @app.exception_handler(EngineError)
    async def _engine_error(request: Request, exc: EngineError) -> JSONResponse:
        return await _api_error(request, from_engine_error(exc))

    # Starlette re-raises what reaches this handler after answering, so the server logs it.
    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        return from_engine_error(exc).response()

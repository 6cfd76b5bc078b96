"""The HTTP face of one model server: JetStream's /generate and /healthcheck, OpenAI's
/v1/*, and Prometheus' /metrics, over one Engine.

Handlers only translate JSON to the engine contract and back; the engine is started and
stopped by whoever runs the app (tenor.server.serve), on the same event loop.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Response

from tenor.engine.api import Engine
from tenor.server.http import jetstream, openai, utility
from tenor.server.http.auth import ApiKeyGuard
from tenor.server.http.body_limit import BodyLimit
from tenor.server.http.body_timeout import BodyTimeout
from tenor.server.http.context import ServerContext
from tenor.server.http.errors import install_error_handlers
from tenor.server.metrics import ServerMetrics

# A prompt is at most a few hundred KiB of text; anything near this is not a request.
MAX_BODY_BYTES = 8 * 1024 * 1024


def build_app(
    engine: Engine,
    *,
    served_model_name: str | None = None,
    api_key: str | None = None,
    tokenized: bool = False,
    accepts_text: bool = False,
    body_timeout_s: float = 30.0,
) -> FastAPI:
    """An app serving `engine` under `served_model_name` (default: engine.model_name).
    With `api_key`, /v1/* and /generate need `Authorization: Bearer <api_key>`. A
    `tokenized` model reads and writes comma-separated token ids in place of text (and, if it
    `accepts_text`, text too)."""
    name = served_model_name if served_model_name is not None else engine.model_name
    if not name:
        raise ValueError("served_model_name must not be empty")
    ctx = ServerContext(
        engine=engine, model_name=name, metrics=ServerMetrics(engine), tokenized=tokenized, accepts_text=accepts_text
    )
    guard = ApiKeyGuard(api_key)

    # With a key, the schema and its viewers are closed too: they would tell strangers what is served.
    docs: dict[str, Any] = {} if api_key is None else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="tenor", summary=f"serving {name}", **docs)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    app.add_middleware(BodyTimeout, timeout_s=body_timeout_s)
    app.state.tenor = ctx
    install_error_handlers(app)
    app.include_router(jetstream.build_router(ctx, guard))
    app.include_router(openai.build_router(ctx, guard))
    app.include_router(utility.build_router(ctx, guard))

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(ctx.metrics.render(), media_type=ctx.metrics.content_type)

    return app


def context_of(app: FastAPI) -> ServerContext:
    return app.state.tenor


def begin_drain(app: FastAPI) -> None:
    """From now on new requests get 503 and /healthcheck says not live; requests already
    admitted run on (the engine decides how long, in `engine.stop(drain_timeout_s)`)."""
    context_of(app).draining = True

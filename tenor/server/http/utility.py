"""The small endpoints clients of vLLM and llama.cpp probe: /health, /version, /tokenize,
/detokenize. Both servers' request and response shapes are accepted and answered:

    GET  /health     -> 200 (empty body) when ready; 503 otherwise (vLLM)
    GET  /version    -> {"version": "0.1.0"}
    POST /tokenize   {"prompt"|"content": str, "add_special_tokens": true} or {"messages": [...]}
                     -> {"tokens": [...], "count": n, "max_model_len": m}
    POST /detokenize {"tokens": [...]} -> {"prompt": str, "content": str}
"""

from __future__ import annotations

from importlib import metadata

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse

from tenor.engine.api import HealthState
from tenor.server.http.auth import ApiKeyGuard
from tenor.server.http.context import ServerContext
from tenor.server.http.errors import bad_request
from tenor.server.http.schemas import DetokenizeBody, TokenizeBody
from tenor.server.pipeline import ChatPrompt, TextPrompt


def tenor_version() -> str:
    try:
        return metadata.version("tenor")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_router(ctx: ServerContext, guard: ApiKeyGuard) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health() -> Response:
        return Response(status_code=200 if ctx.health() is HealthState.READY else 503)

    @router.get("/version")
    async def version() -> JSONResponse:
        return JSONResponse({"version": tenor_version()})

    @router.post("/tokenize", dependencies=[Depends(guard)])
    async def tokenize(body: TokenizeBody) -> JSONResponse:
        text = body.prompt if body.prompt is not None else body.content
        if body.messages is not None:
            if text is not None:
                raise bad_request("send either 'prompt' (or 'content') or 'messages', not both", "messages")
            messages = tuple({"role": m.role, "content": m.text()} for m in body.messages)
            ids = ctx.pipeline.prompt_ids(ChatPrompt(messages))
        elif text is not None:
            field = "prompt" if body.prompt is not None else "content"
            ids = ctx.pipeline.prompt_ids(TextPrompt(text, add_special_tokens=body.add_special_tokens, field=field))
        else:
            raise bad_request("missing required parameter 'prompt'", "prompt", code="missing_required_parameter")
        return JSONResponse(
            {"tokens": list(ids), "count": len(ids), "max_model_len": ctx.engine.limits.max_target_length}
        )

    @router.post("/detokenize", dependencies=[Depends(guard)])
    async def detokenize(body: DetokenizeBody) -> JSONResponse:
        ids = ctx.pipeline.checked_ids(body.tokens, "tokens")
        text = ctx.engine.tokenizer.decode(ids, skip_special_tokens=False)
        return JSONResponse({"prompt": text, "content": text})

    return router

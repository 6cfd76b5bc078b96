"""JetStream's HTTP face (the `jetstream-http` server of Google's GKE guides):

    POST /generate {"prompt": str, "max_tokens": 100, "stream": false,
                    "temperature", "top_k", "top_p", "seed", "stop"}
      -> {"response": str}
    with "stream": true -> application/x-ndjson, one JSON object per line:
      {"text": "..."}                 new text, in order; concatenated they are the answer
      {"error": {...}}                only if the request failed mid-stream (then the stream ends)
    GET /healthcheck -> 200 {"response": {"is_live": true}} when the engine is ready,
                        503 {"response": {"is_live": false, "state": "loading"|...}} otherwise.

Validation is the same as /v1/*, and so is the error body.
"""

from __future__ import annotations

import json
import logging
from typing import AsyncIterator

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from tenor.engine.api import FinishReason, HealthState, SamplingParams
from tenor.server.http.auth import ApiKeyGuard
from tenor.server.http.context import ServerContext
from tenor.server.http.disconnect import ClientDisconnected, cancel_on_disconnect
from tenor.server.http.errors import ApiError, from_engine_error
from tenor.server.http.generation import Generation, GenerationStream
from tenor.server.http.sampling import stop_strings, top_k_value
from tenor.server.http.schemas import GenerateBody

log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"
CLIENT_CLOSED = 499  # nginx's code; nobody reads it, the access log does


def aborted_error() -> ApiError:
    return ApiError(503, "the request was aborted: the server is shutting down", "aborted")


def build_router(ctx: ServerContext, guard: ApiKeyGuard) -> APIRouter:
    router = APIRouter()

    @router.get("/healthcheck")
    async def healthcheck() -> JSONResponse:
        state = ctx.health()
        if state is HealthState.READY:
            return JSONResponse({"response": {"is_live": True}})
        return JSONResponse({"response": {"is_live": False, "state": state.value}}, status_code=503)

    @router.post("/generate", dependencies=[Depends(guard)])
    async def generate(body: GenerateBody, request: Request) -> Response:
        ctx.admit()
        timer = ctx.metrics.start_request()
        sampling = SamplingParams(
            max_tokens=body.max_tokens,
            temperature=body.temperature,
            top_k=top_k_value(body.top_k),
            top_p=body.top_p,
            seed=body.seed,
            stop=stop_strings(body.stop),
        )
        prompt_ids = ctx.engine.tokenizer.encode(body.prompt)
        engine_request = ctx.new_request("gen", prompt_ids, sampling)
        headers = {"X-Request-Id": engine_request.request_id}
        try:
            generation = await cancel_on_disconnect(request, Generation.start(ctx.engine, engine_request, timer))
            if body.stream:
                return GenerationStream(generation, _ndjson(generation), NDJSON, headers)
            result = await cancel_on_disconnect(request, generation.collect())
        except ClientDisconnected:
            return Response(status_code=CLIENT_CLOSED)
        sample = result.samples[0]
        if sample.finish_reason is FinishReason.ABORT:
            raise aborted_error()
        return JSONResponse({"response": sample.text}, headers=headers)

    return router


async def _ndjson(generation: Generation) -> AsyncIterator[str]:
    try:
        async for output in generation.outputs():
            for delta in output.deltas:
                if delta.text:
                    yield json.dumps({"text": delta.text}) + "\n"
                if delta.finish_reason is FinishReason.ABORT:
                    yield json.dumps(aborted_error().body) + "\n"
    except Exception as exc:  # the engine failed mid-stream; the status line is long gone
        log.exception("request %s failed mid-stream", generation.request.request_id)
        yield json.dumps(from_engine_error(exc).body) + "\n"

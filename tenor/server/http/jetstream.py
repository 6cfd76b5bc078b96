"""JetStream's HTTP face (the `jetstream-http` server of Google's GKE guides):

    POST /generate {"prompt": str, "max_tokens": 100, "stream": false,
                    "temperature", "top_k", "top_p", "seed", "stop"}
      -> {"response": str}
    with "stream": true -> application/x-ndjson, one JSON object per line:
      {"text": "..."}                 new text, in order; concatenated they are the answer
      {"error": {...}}                only if the request failed mid-stream (then the stream ends)
    GET /healthcheck -> 200 {"response": {"is_live": true}} when the engine is ready,
                        503 {"response": {"is_live": false, "state": "loading"|...}} otherwise.

JetStream's own HTTP mirror of its gRPC API (jetstream/entrypoints/http/api_server.py):

    POST /v1/generate {"max_tokens", "text_content": {"text"} | "token_content": {"token_ids"},
                       "num_samples"}
      -> text/event-stream of DecodeResponse messages as protobuf JSON (no SSE framing)
    GET /v1/health -> {"is_live": "True"|"False"}

Validation is the same as /v1/*, and so is the error body.
"""

from __future__ import annotations

import json
import logging
from typing import AsyncGenerator, AsyncIterator

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from google.protobuf import json_format

from tenor.engine.api import FinishReason, HealthState, SamplingParams
from tenor.proto import jetstream_pb2
from tenor.server.http.auth import ApiKeyGuard
from tenor.server.http.context import ServerContext
from tenor.server.http.disconnect import ClientDisconnected, cancel_on_disconnect
from tenor.server.http.errors import ApiError, from_engine_error
from tenor.server.http.generation import Generation, GenerationStream
from tenor.server.http.sampling import stop_strings, top_k_value
from tenor.server.http.schemas import DecodeBody, GenerateBody
from tenor.server.orchestrator import decode
from tenor.server.pipeline import TextPrompt

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
        prompt = TextPrompt(body.prompt)
        pipeline = ctx.pipeline.for_prompt(prompt)
        engine_request = ctx.new_request("gen", pipeline.prompt_ids(prompt), sampling)
        headers = {"X-Request-Id": engine_request.request_id}
        try:
            generation = await cancel_on_disconnect(request, Generation.start(pipeline, engine_request, timer))
            if body.stream:
                return GenerationStream(generation, _ndjson(generation), NDJSON, headers)
            result = await cancel_on_disconnect(request, generation.collect())
        except ClientDisconnected:
            return Response(status_code=CLIENT_CLOSED)
        sample = result.samples[0]
        if sample.finish_reason is FinishReason.ABORT:
            raise aborted_error()
        return JSONResponse({"response": sample.text}, headers=headers)

    @router.get("/v1/health")
    async def v1_health() -> JSONResponse:
        # JetStream answers the bool as a string, always with 200.
        return JSONResponse({"is_live": str(ctx.health() is HealthState.READY)})

    @router.post("/v1/generate", dependencies=[Depends(guard)])
    async def v1_generate(body: DecodeBody) -> Response:
        ctx.admit()
        responses = decode(ctx.pipeline, body.to_proto())
        try:  # the first response comes before the status line: a bad request is still a 400
            first = await anext(responses)
        except StopAsyncIteration:
            first = None
        return StreamingResponse(_decode_stream(first, responses), media_type="text/event-stream")

    return router


async def _decode_stream(
    first: jetstream_pb2.DecodeResponse | None, rest: AsyncGenerator[jetstream_pb2.DecodeResponse, None]
) -> AsyncIterator[str]:
    """Each response as protobuf JSON, as JetStream's server writes them."""
    try:
        if first is not None:
            yield json_format.MessageToJson(first)
        async for response in rest:
            yield json_format.MessageToJson(response)
    except Exception as exc:  # the engine failed mid-stream; the status line is long gone
        log.exception("JetStream /v1/generate failed mid-stream")
        yield json.dumps(from_engine_error(exc).body)
    finally:
        await rest.aclose()


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

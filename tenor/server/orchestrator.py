"""JetStream's API over tenor's request pipeline: the gRPC `jetstream_proto.Orchestrator`
service (Decode, HealthCheck) and the `DecodeRequest` <-> pipeline translation that the
HTTP mirror (`POST /v1/generate`) shares.

JetStream semantics kept: text content is tokenized by the server and answered with text
and ids; token content is answered with ids only (the client detokenizes); sampling is the
server's (greedy here: JetStream's requests carry no sampling fields); `num_samples`
samples per request, each streamed as it grows.
"""

from __future__ import annotations

import logging
from typing import Any, AsyncGenerator, AsyncIterator, Callable, Protocol, Sequence

import grpc

from tenor.engine.api import (
    EngineUnavailableError,
    HealthState,
    InvalidRequestError,
    SamplingParams,
)
from tenor.proto import common_pb2, jetstream_pb2, jetstream_pb2_grpc
from tenor.server.error_table import classify, client_message
from tenor.server.pipeline import Prompt, RequestPipeline, TextPrompt, TokenPrompt

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 100  # what JetStream's own HTTP mirror defaults to
Stream = jetstream_pb2.DecodeResponse.StreamContent


def decode_prompt(pipeline: RequestPipeline, request: jetstream_pb2.DecodeRequest) -> tuple[Prompt, bool]:
    """The request's prompt, and whether the client sent ids (and so wants ids only)."""
    if request.lora_adapter_id:
        raise InvalidRequestError(f"lora_adapter_id {request.lora_adapter_id!r}: this server serves no adapters")
    kind = request.WhichOneof("content")
    if kind == "text_content":
        return TextPrompt(request.text_content.text, field="text_content.text"), False
    if kind == "token_content":
        # The ids are the client's, as tokenized (BOS included or not): nothing is added.
        return TokenPrompt(tuple(request.token_content.token_ids), field="token_content.token_ids"), True
    raise InvalidRequestError("the request has no content: set text_content or token_content")


def decode_sampling(request: jetstream_pb2.DecodeRequest) -> SamplingParams:
    max_tokens = request.max_tokens or DEFAULT_MAX_TOKENS
    return SamplingParams(max_tokens=max_tokens, n=request.num_samples or 1)


async def decode(
    pipeline: RequestPipeline, request: jetstream_pb2.DecodeRequest
) -> AsyncGenerator[jetstream_pb2.DecodeResponse, None]:
    """One DecodeResponse per engine output, with every sample's new text and ids."""
    prompt, ids_only = decode_prompt(pipeline, request)
    pipeline = pipeline.for_prompt(prompt)
    sampling = decode_sampling(request)
    engine_request = pipeline.request("decode", pipeline.prompt_ids(prompt), sampling)
    async for output in pipeline.outputs(engine_request):
        samples = [Stream.Sample() for _ in range(sampling.n)]
        for delta in output.deltas:
            sample = samples[delta.index]
            sample.token_ids.extend(delta.token_ids)
            if not ids_only:
                sample.text += pipeline.delta_text(delta, "")
        if any(s.token_ids or s.text for s in samples):
            yield jetstream_pb2.DecodeResponse(stream_content=Stream(samples=samples))


class OrchestratorService(jetstream_pb2_grpc.OrchestratorServicer):
    """`pipeline()` gives the pipeline of the model to serve now, or raises (no model ready)."""

    def __init__(self, pipeline: Callable[[], RequestPipeline], health: Callable[[], HealthState]) -> None:
        self._pipeline = pipeline
        self._health = health

    async def Decode(
        self, request: jetstream_pb2.DecodeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[jetstream_pb2.DecodeResponse]:
        try:
            async for response in decode(self._pipeline(), request):
                yield response
        except Exception as exc:
            kind = classify(exc)
            if kind.internal:
                log.exception("JetStream Decode failed")
            await context.abort(kind.grpc_code, client_message(exc))

    async def HealthCheck(
        self, request: jetstream_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> jetstream_pb2.HealthCheckResponse:
        return jetstream_pb2.HealthCheckResponse(is_live=self._health() is HealthState.READY)


async def start_orchestrator(service: OrchestratorService, host: str, port: int) -> tuple[grpc.aio.Server, int]:
    """A started gRPC server with the Orchestrator on host:port (0: a free port); returns it
    and its port. UserError when the port cannot be bound."""
    from tenor.errors import UserError

    server = grpc.aio.server()
    jetstream_pb2_grpc.add_OrchestratorServicer_to_server(service, server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if not bound:
        raise UserError(f"cannot listen for gRPC on {address}; pick another port with --grpc-port")
    await server.start()
    return server, bound


class _LoadedModels(Protocol):
    def models(self) -> Sequence[Any]: ...


def jetstream_orchestrator(table: _LoadedModels) -> OrchestratorService:
    """The Orchestrator of a model server: JetStream requests name no model, so it serves
    the one model loaded there (UNAVAILABLE while there is none, or more than one)."""

    def loaded() -> list[Any]:
        return [
            m
            for m in table.models()
            if m.engine is not None and m.servable is not None and m.status == common_pb2.ModelStatus.LOADED
        ]

    def pipeline() -> RequestPipeline:
        models = loaded()
        if len(models) != 1:
            raise EngineUnavailableError(f"JetStream's API serves one model per server; {len(models)} are loaded here")
        servable = models[0].servable
        return RequestPipeline(models[0].engine, servable.tokenized, servable.accepts_text)

    def health() -> HealthState:
        models = loaded()
        return models[0].engine.health() if len(models) == 1 else HealthState.LOADING

    return OrchestratorService(pipeline, health)

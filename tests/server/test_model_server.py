"""The model server without a cell: its model table, the Modelet service over gRPC, and
its HTTP face, with MockEngine in place of the real engine (joining is in tests/integration)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

import grpc
import httpx
import pytest

from tenor.engine.api import EngineUnavailableError
from tenor.engine.mock_engine import MockEngine
from tenor.proto import (
    common_pb2,
    jetstream_pb2,
    jetstream_pb2_grpc,
    lm_pb2,
    lm_pb2_grpc,
    modelet_pb2,
    modelet_pb2_grpc,
)
from tenor.server.lm_service import ModelNotServedError
from tenor.server.model_server import ModelServer, ModelServerConfig
from tenor.server.modelet_service import ModelSpec, ModelTable

Status = common_pb2.ModelStatus
MODEL = "/tenor/test/lm"
CONFIG = "test.TinyLlamaRandom"


class GatedEngine(MockEngine):
    """A MockEngine whose start() waits for the test to open the gate, or fails on request."""

    gate: asyncio.Event | None = None
    fail_start = False

    async def start(self) -> None:
        if GatedEngine.gate is not None:
            await GatedEngine.gate.wait()
        if GatedEngine.fail_start:
            raise RuntimeError("weights are corrupt\nsecond line that must not show")
        await super().start()


@pytest.fixture(autouse=True)
def reset_gate():
    GatedEngine.gate, GatedEngine.fail_start = None, False
    yield
    GatedEngine.gate, GatedEngine.fail_start = None, False


def mock_factory(servable, checkpoint, options):
    return GatedEngine(model_name=servable.name)


def new_table() -> ModelTable:
    return ModelTable(engine_factory=mock_factory, drain_timeout_s=0.5)


@contextlib.asynccontextmanager
async def model_server(http: bool = False) -> AsyncIterator[ModelServer]:
    config = ModelServerConfig(cell="/tenor/test", root="memory://unused", http_port=0 if http else None)
    server = ModelServer(config, new_table())
    await server.start(join=False)
    try:
        yield server
    finally:
        await server.stop()


def load_request(config: str = CONFIG, **overrides: str) -> modelet_pb2.LoadRequest:
    return modelet_pb2.LoadRequest(model_name=MODEL, config_name=config, overrides=overrides)


async def status_of(stub: modelet_pb2_grpc.ModeletStub) -> dict[str, modelet_pb2.ModelState]:
    reply = await stub.GetStatus(modelet_pb2.GetStatusRequest(), timeout=1)
    return {m.model_name: m for m in reply.models}


def test_load_shows_loading_then_loaded_and_serves():
    async def body():
        GatedEngine.gate = asyncio.Event()
        async with model_server() as server, server.access.aio_channel(server.address) as channel:
            modelet, lm = modelet_pb2_grpc.ModeletStub(channel), lm_pb2_grpc.LMServiceStub(channel)
            load = asyncio.ensure_future(modelet.Load(load_request()))
            await asyncio.sleep(0.1)
            loading = (await status_of(modelet))[MODEL]
            GatedEngine.gate.set()
            await load
            loaded = (await status_of(modelet))[MODEL]
            reply = await lm.Generate(lm_pb2.GenerateRequest(model_key=MODEL, text="abc"))
            with pytest.raises(grpc.aio.AioRpcError):
                await lm.Generate(lm_pb2.GenerateRequest(model_key=MODEL, text=""))
            after = await modelet.GetStatus(modelet_pb2.GetStatusRequest())
            return loading, loaded, reply, after

    loading, loaded, reply, after = asyncio.run(body())
    assert loading.status == Status.LOADING and loading.config_name == CONFIG
    assert loaded.status == Status.LOADED and loaded.loaded_at > 0
    assert reply.texts[0].text
    state = after.models[0]
    assert (state.requests_ok, state.requests_failed) == (1, 1)
    assert 0 < state.latency_p50_ms <= state.latency_p99_ms
    assert after.server.memory_used_bytes > 0 and after.server.uptime_s > 0


def test_jetstreams_orchestrator_serves_the_one_loaded_model():
    async def body():
        async with model_server() as server, server.access.aio_channel(server.address) as channel:
            modelet, jetstream = modelet_pb2_grpc.ModeletStub(channel), jetstream_pb2_grpc.OrchestratorStub(channel)
            before = await jetstream.HealthCheck(jetstream_pb2.HealthCheckRequest())
            decode = jetstream_pb2.DecodeRequest(
                max_tokens=3, text_content=jetstream_pb2.DecodeRequest.TextContent(text="abc")
            )
            with pytest.raises(grpc.aio.AioRpcError) as none_loaded:
                _ = [r async for r in jetstream.Decode(decode)]
            await modelet.Load(load_request())
            after = await jetstream.HealthCheck(jetstream_pb2.HealthCheckRequest())
            text = "".join([s.text async for r in jetstream.Decode(decode) for s in r.stream_content.samples])
            return before, none_loaded.value, after, text

    before, none_loaded, after, text = asyncio.run(body())
    assert not before.is_live and after.is_live
    assert none_loaded.code() == grpc.StatusCode.UNAVAILABLE and "0 are loaded" in none_loaded.details()
    assert text == "def"


@pytest.mark.parametrize(
    "request_, code, reason",
    [
        (
            load_request("test.NoSuchConfig"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "unknown model config 'test.NoSuchConfig'",
        ),
        (load_request(max_batch_size="0"), grpc.StatusCode.INVALID_ARGUMENT, "max_batch_size must be >= 1"),
        (load_request(no_such_knob="1"), grpc.StatusCode.INVALID_ARGUMENT, "unknown override(s) no_such_knob"),
        (load_request(), grpc.StatusCode.FAILED_PRECONDITION, "weights are corrupt"),
    ],
)
def test_failed_load_keeps_its_reason_and_the_server_keeps_answering(request_, code, reason):
    async def body():
        GatedEngine.fail_start = request_.config_name == CONFIG and not request_.overrides
        async with model_server() as server, server.access.aio_channel(server.address) as channel:
            modelet = modelet_pb2_grpc.ModeletStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await modelet.Load(request_)
            state = (await status_of(modelet))[MODEL]
            GatedEngine.fail_start = False
            await modelet.Load(load_request())  # a FAILED name may be loaded again
            again = (await status_of(modelet))[MODEL]
            return failed.value, state, again

    error, state, again = asyncio.run(body())
    assert error.code() == code and reason in error.details()
    assert state.status == Status.FAILED and reason in state.failure_reason
    assert "\n" not in state.failure_reason
    assert again.status == Status.LOADED


def test_load_is_idempotent_and_rejects_another_spec():
    async def body():
        table = new_table()
        spec = ModelSpec.of(CONFIG, "", {})
        await asyncio.gather(table.load(MODEL, spec), table.load(MODEL, spec))
        engine = table.ready(MODEL).engine
        await table.load(MODEL, spec)
        with pytest.raises(Exception, match="another spec"):
            await table.load(MODEL, ModelSpec.of(CONFIG, "/other/ckpt", {}))
        same = table.ready(MODEL).engine is engine
        await table.close()
        return same

    assert asyncio.run(body())


def test_unload_while_loading_fails_the_load_and_forgets_the_model():
    async def body():
        GatedEngine.gate = asyncio.Event()
        table = new_table()
        load = asyncio.ensure_future(table.load(MODEL, ModelSpec.of(CONFIG, "", {})))
        await asyncio.sleep(0.05)
        await table.unload(MODEL)
        with pytest.raises(Exception, match="unloaded while loading"):
            await load
        await table.unload("/tenor/test/never-loaded")  # unknown names are fine
        with pytest.raises(ModelNotServedError):
            table.ready(MODEL)
        return table.models()

    assert asyncio.run(body()) == []


def test_update_loaded_swaps_the_engine_and_unloaded_model_is_not_served():
    async def body():
        table = new_table()
        await table.load(MODEL, ModelSpec.of(CONFIG, "", {}))
        old = table.ready(MODEL).engine
        await table.update_loaded(MODEL, ModelSpec.of(CONFIG, "", {"max_batch_size": "4"}))
        new = table.ready(MODEL).engine
        stopped_old = old.health().value
        served = table.models()[0]
        await table.unload(MODEL)
        return old is new, stopped_old, served.servable.max_batch_size

    same, stopped_old, batch = asyncio.run(body())
    assert not same and stopped_old == "stopped" and batch == 4


def test_loading_model_is_unavailable_not_missing():
    async def body():
        GatedEngine.gate = asyncio.Event()
        table = new_table()
        load = asyncio.ensure_future(table.load(MODEL, ModelSpec.of(CONFIG, "", {})))
        await asyncio.sleep(0.05)
        with pytest.raises(EngineUnavailableError, match="LOADING"):
            table.ready(MODEL)
        GatedEngine.gate.set()
        await load
        await table.close()

    asyncio.run(body())


def test_http_face_health_metrics_and_per_model_routes():
    async def body():
        async with model_server(http=True) as server:
            async with httpx.AsyncClient(base_url=f"http://{server.http_address}", timeout=10) as http:
                empty = await http.get("/healthcheck")
                await server.table.load(MODEL, ModelSpec.of(CONFIG, "", {}))
                healthy = await http.get("/healthcheck")
                models = await http.get("/models/lm/v1/models")
                generated = await http.post("/models/lm/generate", json={"prompt": "abc", "max_tokens": 3})
                metrics = await http.get("/metrics")
                missing = await http.get("/models/other/v1/models")
                await server.table.unload(MODEL)
                gone = await http.get("/models/lm/v1/models")
        return empty, healthy, models, generated, metrics, missing, gone

    empty, healthy, models, generated, metrics, missing, gone = asyncio.run(body())
    assert empty.status_code == 503
    assert healthy.status_code == 200 and healthy.json() == {"is_live": True, "models": {MODEL: "LOADED"}}
    assert [m["id"] for m in models.json()["data"]] == [MODEL]
    assert generated.status_code == 200 and generated.json()["response"]
    assert f'tenor:model_status{{model="{MODEL}",status="LOADED"}} 1.0' in metrics.text
    assert missing.status_code == 404 and gone.status_code == 404


def test_model_spec_drops_admin_keys_and_parses_json_values():
    spec = ModelSpec.of(CONFIG, "", {"max_batch_size": "4", "dtype": "float32", "ram": "100", "constraints": "a,b"})
    assert spec.overrides == (("dtype", "float32"), ("max_batch_size", "4"))
    assert spec.checkpoint is None
    assert (spec.servable().max_batch_size, spec.servable().dtype) == (4, "float32")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"platform": "tpu"}, "platform"),
        ({"port": 70000}, "port"),
        ({"memory_bytes": -1}, "memory_bytes"),
        ({"tags": ("a,b",)}, "tags"),
        ({"rejoin_s": 0}, "rejoin_s"),
    ],
)
def test_config_rejects_nonsense(kwargs, words):
    with pytest.raises(ValueError, match=words):
        ModelServerConfig(cell="/tenor/test", root="file:///tmp/x", **kwargs)

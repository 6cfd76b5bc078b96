"""Two real model servers on loopback (real engines, real gRPC): one prefills, the other
decodes with its KV blocks; LM Generate answers exactly as an interleaved server does."""

import asyncio

import grpc
import httpx
import pytest

from tenor.disagg.decode_engine import DecodeEngine
from tenor.disagg.roles import DecodeRole, check_prefill_engine
from tenor.engine.mock_engine import MockEngine
from tenor.errors import UserError
from tenor.proto import lm_pb2, lm_pb2_grpc, modelet_pb2, modelet_pb2_grpc
from tenor.server.model_server import ModelServer, ModelServerConfig
from tenor.server.modelet_service import LoadFailedError, ModelSpec, ModelTable

MODEL = "/tenor/test/lm"
PROMPT = "the quick brown fox jumps over the lazy dog, again and again and again"


async def loaded_server(role: str = "", **config) -> ModelServer:
    server = ModelServer(ModelServerConfig(cell="/tenor/test", root="memory://unused", **config))
    await server.start(join=False)
    async with server.access.aio_channel(server.address) as channel:
        await modelet_pb2_grpc.ModeletStub(channel).Load(
            modelet_pb2.LoadRequest(model_name=MODEL, config_name="test.TinyLlamaRandom", role=role)
        )
    return server


async def status(server: ModelServer) -> modelet_pb2.ModelState:
    async with server.access.aio_channel(server.address) as channel:
        reply = await modelet_pb2_grpc.ModeletStub(channel).GetStatus(modelet_pb2.GetStatusRequest())
    return next(m for m in reply.models if m.model_name == MODEL)


async def generate(server: ModelServer, text: str) -> list[str]:
    extra = lm_pb2.ExtraInputs(
        items={"per_example_max_decode_steps": 12, "num_samples": 2, "temperature": 0.9, "seed": 5}
    )
    async with server.access.aio_channel(server.address) as channel:
        reply = await lm_pb2_grpc.LMServiceStub(channel).Generate(
            lm_pb2.GenerateRequest(model_key=MODEL, text=text, extra_inputs=extra)
        )
    return [t.text for t in reply.texts]


def test_decode_server_prefills_on_the_prefill_server():
    async def main():
        prefill = await loaded_server()
        decode = await loaded_server(prefill_targets=(prefill.address,), http_port=0)
        try:
            got = [await generate(decode, PROMPT), await generate(decode, PROMPT + " and more" * 4)]
            want = [await generate(prefill, PROMPT), await generate(prefill, PROMPT + " and more" * 4)]
            engine = decode.table.ready(MODEL).engine
            remote = engine.remote.stats
            blocks = engine._blocks
            async with httpx.AsyncClient() as http:
                metrics = (await http.get(f"http://{decode.http_address}/metrics")).text
            all_free = blocks.num_free == blocks.num_blocks
            return got, want, prefill.kv_transfer_service.transfers_sent, remote, all_free, metrics
        finally:
            await decode.stop()
            await prefill.stop()

    got, want, sent, remote, all_free, metrics = asyncio.run(main())
    assert got == want
    assert sent == 2 and remote.remote == 2 and remote.local_fallbacks == 0
    assert remote.blocks_skipped >= 4  # the second prompt's shared prefix was not sent again
    assert all_free
    assert 'tenor:disagg_prefills_total{model="/tenor/test/lm",where="remote"} 2.0' in metrics
    assert "tenor:kv_transfer_latency_seconds_count 2.0" in metrics
    assert "tenor:kv_transfers_failed_total 0.0" in metrics


def test_roles_as_loaded_are_reported_and_a_decode_replica_without_prefill_replicas_prefills_locally():
    """Placed as the admin would: "prefill" runs the engine as it is, "decode" wraps it (here
    no admin answers WatchLoc, so no prefill replica is known and it prefills locally)."""

    async def main():
        prefill = await loaded_server(role="prefill")
        decode = await loaded_server(role="decode")
        interleaved = await loaded_server()
        try:
            states = [await status(s) for s in (prefill, decode, interleaved)]
            engines = [s.table.ready(MODEL).engine for s in (prefill, decode, interleaved)]
            got, want = await generate(decode, PROMPT), await generate(interleaved, PROMPT)
            return states, engines, got, want, engines[1].remote.stats
        finally:
            for server in (prefill, decode, interleaved):
                await server.stop()

    states, engines, got, want, stats = asyncio.run(main())
    assert [s.role for s in states] == ["prefill", "decode", "both"]
    assert [isinstance(e, DecodeEngine) for e in engines] == [False, True, False]
    assert got == want and stats.local_fallbacks == 1 and stats.remote == 0


def test_a_role_the_server_or_engine_cannot_take_fails_the_load_in_one_line():
    async def main():
        server = ModelServer(ModelServerConfig(cell="/tenor/test", root="memory://unused"))
        await server.start(join=False)
        try:
            async with server.access.aio_channel(server.address) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await modelet_pb2_grpc.ModeletStub(channel).Load(
                        modelet_pb2.LoadRequest(model_name=MODEL, config_name="test.TinyLlamaRandom", role="sideways")
                    )
            return info.value
        finally:
            await server.stop()

    error = asyncio.run(main())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "role must be one of both, prefill, decode, got 'sideways'" in error.details()

    async def group_table():  # a table without a role wrapper (a model-server group's) runs "both" only
        table = ModelTable(engine_factory=lambda servable, checkpoint, options: MockEngine(), drain_timeout_s=0.1)
        with pytest.raises(LoadFailedError) as info:
            await table.load(MODEL, ModelSpec.of("test.TinyLlamaRandom", "", {}, "decode"))
        await table.close()
        return info.value

    assert "cannot run a model as decode" in str(asyncio.run(group_table()))
    with pytest.raises(UserError, match="cannot import KV blocks: it cannot run as decode"):
        DecodeRole().wrap(MODEL, MockEngine(), lambda: ["h:1"])
    with pytest.raises(UserError, match="cannot export KV blocks: it cannot run as prefill"):
        check_prefill_engine(MODEL, MockEngine())

"""Two real model servers on loopback (real engines, real gRPC): one prefills, the other
decodes with its KV blocks; LM Generate answers exactly as an interleaved server does."""

import asyncio

import httpx

from tenor.proto import lm_pb2, lm_pb2_grpc, modelet_pb2, modelet_pb2_grpc
from tenor.server.model_server import ModelServer, ModelServerConfig

MODEL = "/tenor/test/lm"
PROMPT = "the quick brown fox jumps over the lazy dog, again and again and again"


async def loaded_server(**config) -> ModelServer:
    server = ModelServer(ModelServerConfig(cell="/tenor/test", root="memory://unused", **config))
    await server.start(join=False)
    async with server.access.aio_channel(server.address) as channel:
        await modelet_pb2_grpc.ModeletStub(channel).Load(
            modelet_pb2.LoadRequest(model_name=MODEL, config_name="test.TinyLlamaRandom"))
    return server


async def generate(server: ModelServer, text: str) -> list[str]:
    extra = lm_pb2.ExtraInputs(items={"per_example_max_decode_steps": 12, "num_samples": 2,
                                      "temperature": 0.9, "seed": 5})
    async with server.access.aio_channel(server.address) as channel:
        reply = await lm_pb2_grpc.LMServiceStub(channel).Generate(
            lm_pb2.GenerateRequest(model_key=MODEL, text=text, extra_inputs=extra))
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

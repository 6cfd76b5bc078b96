"""A prefill engine behind a real gRPC KVTransfer server on loopback, a decode engine pulling
blocks through GrpcKVTransfer: tokens equal an interleaved engine's; corrupted, truncated,
stalled and dead transfers are detected and retried elsewhere or prefilled locally; no KV
block leaks on the decode side."""

import asyncio
import time

import grpc
import pytest

from tenor import registry
from tenor.disagg.remote_prefill import RemotePrefill, RemotePrefillConfig
from tenor.disagg.transfer import GrpcKVTransfer, KVTransferService
from tenor.engine.api import GenerateRequest, SamplingParams
from tenor.engine.llm_engine import BLOCK_SIZE, LLMEngine
from tenor.engine.options import EngineOptions
from tenor.proto import kv_transfer_pb2 as pb
from tenor.proto import kv_transfer_pb2_grpc as pb_grpc
from tenor.server.lm_service import ModelNotServedError, ReadyModel
from tests.fakes.cell import free_port

TINY = registry.get("test.TinyLlamaRandom")
KEY = "/tenor/test/tiny"
PROMPT = tuple(range(3, 3 + 75))


class OneModel:
    def __init__(self, engine):
        self.engine = engine

    def ready(self, model_key):
        if model_key != KEY:
            raise ModelNotServedError(f"{model_key} is not loaded on this server")
        return ReadyModel(self.engine, True, lambda s: None, lambda: None)


async def start_prefill_server(engine, fault=None):
    server = grpc.aio.server()
    service = KVTransferService(OneModel(engine), chunk_bytes=4096, fault=fault)
    pb_grpc.add_KVTransferServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}", service


async def tokens(stream):
    out = [o async for o in stream]
    return [[t for o in out for d in o.deltas if d.index == i for t in d.token_ids] for i in range(2)]


def request(**sampling):
    return GenerateRequest("r", PROMPT, SamplingParams(max_tokens=8, ignore_eos=True, **sampling))


def corrupt_once():
    state = {"done": False}

    def fault(chunks):
        for i, chunk in enumerate(chunks):
            if i == 2 and not state["done"]:
                state["done"] = True
                data = bytearray(chunk.data)
                data[0] ^= 1
                chunk = pb.KVChunk(data=bytes(data))
            yield chunk

    return fault


def truncate(chunks):
    items = list(chunks)
    yield from items[:-1]


def stall(chunks):
    for i, chunk in enumerate(chunks):
        if i == 1:
            time.sleep(3.0)
        yield chunk


async def scenario(server_faults, client_fault=None, dead_first=False, timeout_s=20.0, **sampling):
    prefill_engine, decoder, interleaved = (LLMEngine(TINY, None, EngineOptions(warmup=False)) for _ in range(3))
    for engine in (prefill_engine, decoder, interleaved):
        await engine.start()
    servers, targets = [], []
    if dead_first:
        targets.append(f"127.0.0.1:{free_port()}")
    for fault in server_faults:
        server, target, _ = await start_prefill_server(prefill_engine, fault)
        servers.append(server)
        targets.append(target)
    transfer = GrpcKVTransfer(fault=client_fault)
    remote = RemotePrefill(transfer, lambda: targets, RemotePrefillConfig(timeout_s=timeout_s, max_attempts=3))
    try:
        got = await tokens(remote.generate(decoder, KEY, request(**sampling), BLOCK_SIZE))
        want = await tokens(interleaved.generate(request(**sampling)))
        for _ in range(50):
            if decoder._blocks.num_free == decoder._blocks.num_blocks:
                break
            await asyncio.sleep(0.02)
        leaked = decoder._blocks.num_blocks - decoder._blocks.num_free
    finally:
        await transfer.close()
        for server in servers:
            await server.stop(None)
        for engine in (prefill_engine, decoder, interleaved):
            await engine.stop()
    return got, want, leaked, remote.stats, transfer.stats


def test_tokens_equal_interleaved_through_grpc_with_n2():
    got, want, leaked, stats, tstats = asyncio.run(scenario([None], n=2, temperature=0.7, seed=3))
    assert got == want and leaked == 0
    assert stats.remote == 1 and stats.local_fallbacks == 0
    assert tstats.blocks_received == len(PROMPT) // BLOCK_SIZE and tstats.bytes_received > 0


@pytest.mark.parametrize("fault", [corrupt_once(), truncate], ids=["corrupt", "truncate"])
def test_bad_transfer_is_detected_and_retried(fault):
    got, want, leaked, stats, tstats = asyncio.run(scenario([fault, None]))
    assert got == want and leaked == 0
    assert stats.retried == 1 and stats.remote == 1
    assert tstats.transfers_failed == 1 and tstats.transfers_ok == 1


def test_dead_replica_then_stalled_one_fall_back_to_local_prefill():
    got, want, leaked, stats, tstats = asyncio.run(scenario([stall], dead_first=True, timeout_s=1.0))
    assert got == want and leaked == 0
    assert stats.retried == 2 and stats.local_fallbacks == 1 and stats.remote == 0


def test_prefill_server_refuses_bad_input():
    async def main():
        engine = LLMEngine(TINY, None, EngineOptions(warmup=False))
        await engine.start()
        server, target, _ = await start_prefill_server(engine)
        codes = []
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.KVTransferStub(channel)
            for req in (
                pb.PrefillRequest(model_key="/tenor/test/nope", prompt_token_ids=[3, 4]),
                pb.PrefillRequest(model_key=KEY, prompt_token_ids=[3, 4], skip_blocks=-1),
                pb.PrefillRequest(model_key=KEY, prompt_token_ids=[99999]),
            ):
                try:
                    async for _ in stub.Prefill(req):
                        pass
                    codes.append(None)
                except grpc.aio.AioRpcError as exc:
                    codes.append(exc.code())
            ok = [c async for c in stub.Prefill(pb.PrefillRequest(model_key=KEY, prompt_token_ids=list(PROMPT)))]
        await server.stop(None)
        await engine.stop()
        return codes, ok

    codes, ok = asyncio.run(main())
    assert codes == [grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT]
    assert ok[0].WhichOneof("part") == "header"  # still serving after the bad requests


def test_decode_engine_refuses_bad_input_and_overload_before_any_transfer():
    from tenor.disagg.decode_engine import DecodeEngine
    from tenor.engine.api import InvalidRequestError, OverloadedError

    class NoTransfer(GrpcKVTransfer):
        async def fetch(self, *args, **kwargs):
            raise AssertionError("no transfer may start for a refused request")

    async def main():
        engine = LLMEngine(TINY, None, EngineOptions(warmup=False, max_waiting=0))
        await engine.start()
        decoder = DecodeEngine(engine, KEY, RemotePrefill(NoTransfer(), lambda: ["127.0.0.1:1"]), BLOCK_SIZE)
        errors = []
        for prompt in ((99999,) * 20, tuple(range(3, 300))):
            try:
                decoder.generate(GenerateRequest("r", prompt, SamplingParams(max_tokens=4)))
            except InvalidRequestError as exc:
                errors.append(type(exc).__name__)
        streams = [
            engine.generate(GenerateRequest(f"r{i}", (5, 6, 7), SamplingParams(max_tokens=50, ignore_eos=True)))
            for i in range(TINY.max_batch_size)
        ]
        try:
            decoder.generate(GenerateRequest("r", PROMPT, SamplingParams(max_tokens=4)))
        except OverloadedError as exc:
            errors.append(type(exc).__name__)
        for stream in streams:
            await stream.aclose()
        await engine.stop()
        return errors

    assert asyncio.run(main()) == ["InvalidRequestError", "InvalidRequestError", "OverloadedError"]

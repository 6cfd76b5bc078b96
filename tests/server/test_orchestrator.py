"""JetStream's gRPC Orchestrator: in process over the mock engine (errors, health), and
against `tenor serve --grpc-port` from a client generated from JetStream's proto in its own
process (its descriptors are JetStream's file, not tenor's), as benchmark_serving.py is."""

import asyncio
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import httpx
import pytest

from tenor.engine.api import EngineLimits
from tenor.engine.mock_engine import MockEngine
from tenor.proto import jetstream_pb2, jetstream_pb2_grpc
from tenor.server.orchestrator import OrchestratorService, start_orchestrator
from tenor.server.pipeline import RequestPipeline

PROTO = Path(__file__).resolve().parents[2] / "tenor" / "proto" / "jetstream.proto"


def run_with_orchestrator(body, engine: MockEngine | None = None):
    async def main():
        mock = engine or MockEngine(limits=EngineLimits(max_prefill_predict_length=8, max_target_length=16))
        await mock.start()
        server, port = await start_orchestrator(
            OrchestratorService(lambda: RequestPipeline(mock), mock.health), "127.0.0.1", 0
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                return await body(jetstream_pb2_grpc.OrchestratorStub(channel))
        finally:
            await server.stop(0)
            await mock.stop()

    return asyncio.run(main())


def test_decode_streams_text_and_ids_and_health():
    async def body(stub):
        text = [
            r
            async for r in stub.Decode(
                jetstream_pb2.DecodeRequest(
                    max_tokens=3, num_samples=2, text_content=jetstream_pb2.DecodeRequest.TextContent(text="abc")
                )
            )
        ]
        ids = [
            r
            async for r in stub.Decode(
                jetstream_pb2.DecodeRequest(
                    max_tokens=2, token_content=jetstream_pb2.DecodeRequest.TokenContent(token_ids=[100, 101])
                )
            )
        ]
        health = await stub.HealthCheck(jetstream_pb2.HealthCheckRequest())
        return text, ids, health

    text, ids, health = run_with_orchestrator(body)
    assert ["".join(r.stream_content.samples[i].text for r in text) for i in (0, 1)] == ["def", "efg"]
    assert [t for r in ids for s in r.stream_content.samples for t in s.token_ids] == [102, 103]
    assert all(not s.text for r in ids for s in r.stream_content.samples)  # ids in, ids out
    assert health.is_live


@pytest.mark.parametrize(
    "request_, words",
    [
        (jetstream_pb2.DecodeRequest(max_tokens=2), "no content"),
        (
            jetstream_pb2.DecodeRequest(
                max_tokens=2, lora_adapter_id="x", text_content=jetstream_pb2.DecodeRequest.TextContent(text="a")
            ),
            "adapters",
        ),
        (
            jetstream_pb2.DecodeRequest(
                max_tokens=2, text_content=jetstream_pb2.DecodeRequest.TextContent(text="a" * 9)
            ),
            "maximum prompt length is 8",
        ),
        (
            jetstream_pb2.DecodeRequest(
                max_tokens=2, token_content=jetstream_pb2.DecodeRequest.TokenContent(token_ids=[-4])
            ),
            "token id -4 is out of range",
        ),
        (
            jetstream_pb2.DecodeRequest(max_tokens=99, text_content=jetstream_pb2.DecodeRequest.TextContent(text="a")),
            "'max_tokens' is too large",
        ),
    ],
)
def test_bad_decode_requests_are_invalid_argument(request_, words):
    async def body(stub):
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            _ = [r async for r in stub.Decode(request_)]
        ok = [
            r
            async for r in stub.Decode(
                jetstream_pb2.DecodeRequest(
                    max_tokens=1, text_content=jetstream_pb2.DecodeRequest.TextContent(text="a")
                )
            )
        ]
        return failed.value, ok

    error, ok = run_with_orchestrator(body)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and words in error.details()
    assert ok  # and the server keeps serving


CLIENT = textwrap.dedent("""
    import json, sys
    import grpc
    from jetstream.core.proto import jetstream_pb2, jetstream_pb2_grpc

    channel = grpc.insecure_channel(sys.argv[1])
    stub = jetstream_pb2_grpc.OrchestratorStub(channel)
    out = {"live": stub.HealthCheck(jetstream_pb2.HealthCheckRequest()).is_live}
    text = jetstream_pb2.DecodeRequest(max_tokens=6, text_content=jetstream_pb2.DecodeRequest.TextContent(text="hello"))
    out["stream"] = [[s.text for s in r.stream_content.samples] for r in stub.Decode(text)]
    # Unary use: take the whole stream at once (what benchmark_serving.py does with token ids).
    ids = jetstream_pb2.DecodeRequest(max_tokens=4, token_content=jetstream_pb2.DecodeRequest.TokenContent(
        token_ids=[1, 107, 104, 111]))
    out["ids"] = [list(s.token_ids) for r in stub.Decode(ids) for s in r.stream_content.samples]
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_a_client_generated_from_jetstreams_proto(tiny_server, tmp_path):
    from grpc_tools import protoc

    package = tmp_path / "jetstream" / "core" / "proto"
    package.mkdir(parents=True)
    shutil.copy(PROTO, package / "jetstream.proto")
    for folder in (tmp_path / "jetstream", tmp_path / "jetstream" / "core", package):
        (folder / "__init__.py").touch()
    assert (
        protoc.main(
            [
                "protoc",
                f"-I{tmp_path}",
                f"--python_out={tmp_path}",
                f"--grpc_python_out={tmp_path}",
                "jetstream/core/proto/jetstream.proto",
            ]
        )
        == 0
    )
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, tiny_server.grpc_address],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["live"] is True
    streamed = "".join(texts[0] for texts in out["stream"])
    greedy = httpx.post(tiny_server.url + "/generate", json={"prompt": "hello", "max_tokens": 6}, timeout=60)
    assert streamed == greedy.json()["response"]  # the same engine, greedy both ways
    completion = httpx.post(
        tiny_server.url + "/v1/completions",
        timeout=60,
        json={"prompt": [1, 107, 104, 111], "max_tokens": 4, "temperature": 0},
    )
    generated = [t for ids in out["ids"] for t in ids]
    assert len(generated) == 4
    tokenized = httpx.post(tiny_server.url + "/detokenize", json={"tokens": generated}).json()["prompt"]
    assert tokenized == completion.json()["choices"][0]["text"]

"""Disaggregated serving on real processes: an admin, two prefill model servers and one
decode model server (`--prefill-from` both). Requests sent to the decode server are
prefilled on a prefill server; one prefill server is killed -9 mid-traffic: no request
fails, and the decode server's KV cache is empty again once idle."""

from __future__ import annotations

import re
import threading

import grpc
import httpx

from tenor.proto import lm_pb2, lm_pb2_grpc
from tests.fakes.cell import free_port, wait_until
from tests.fakes.token import bearer
from tests.integration.cell_processes import (
    CONFIG,
    ModelServerProcess,
    cell_tls,
    run_cli,
    running_cell,
)

CELL = "/tenor/disagg"
MODEL = f"{CELL}/lm"
PROMPT = "a long shared prompt that spans several KV blocks of sixteen tokens each, "


def generate(root: str, address: str, text: str) -> str:
    with grpc.secure_channel(address, cell_tls().channel_credentials()) as channel:
        reply = lm_pb2_grpc.LMServiceStub(channel).Generate(lm_pb2.GenerateRequest(
            model_key=MODEL, text=text,
            extra_inputs=lm_pb2.ExtraInputs(items={"per_example_max_decode_steps": 6})), timeout=30,
            metadata=bearer(root, CELL))
    return reply.texts[0].text


def metric(http: str, name: str, path: str = "/metrics") -> float:
    text = httpx.get(f"http://{http}{path}", timeout=5).text
    values = [float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)]
    assert values, f"{name} is not in {path}"
    return sum(values)


def test_prefill_server_killed_mid_traffic_fails_no_request_and_leaks_no_block(tmp_path):
    root = f"file://{tmp_path}"
    with running_cell(root, CELL, num_admins=1, num_servers=2) as cell:
        http_port = free_port()
        decode = ModelServerProcess(root, CELL)
        decode.args += ["--http-port", str(http_port),
                        "--prefill-from", ",".join(s.address for s in cell.servers)]
        with decode:
            published = run_cli(root, "publish", MODEL, CONFIG, "None", "3")
            assert published.returncode == 0, published.stderr
            cell.wait_replicas(MODEL, 3)
            http = f"127.0.0.1:{http_port}"
            interleaved = generate(root, cell.servers[0].address, PROMPT + "one")
            assert generate(root, decode.address, PROMPT + "one") == interleaved
            failures: list[str] = []
            done = [0]
            stop = threading.Event()

            def traffic() -> None:
                i = 0
                while not stop.is_set():
                    i += 1
                    try:
                        generate(root, decode.address, f"{PROMPT} request {i} " * 2)
                        done[0] += 1
                    except Exception as exc:  # the test fails on any
                        failures.append(repr(exc))

            thread = threading.Thread(target=traffic, daemon=True)
            thread.start()
            wait_until(lambda: done[0] >= 3, 60, "3 requests through the decode server")
            cell.servers[0].kill()
            target = done[0] + 5
            wait_until(lambda: done[0] >= target or failures, 60, "5 more requests after the kill")
            stop.set()
            thread.join(60)
            assert failures == []
            remote = metric(http, 'tenor:disagg_prefills_total{model="/tenor/disagg/lm",where="remote"}')
            assert remote >= 8 and metric(http, "tenor:kv_transfer_received_blocks_total") >= 8
            assert metric(http, "tenor:kv_transfers_retried_total") >= 1  # the dead server was tried, then the other
            wait_until(lambda: metric(http, "tenor:kv_cache_usage_perc", "/models/lm/metrics") == 0.0, 10,
                       "the decode server's KV cache to empty")

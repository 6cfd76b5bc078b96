"""Disaggregated serving on real processes (mTLS and the cell token on every RPC).

- Placed by the admin: `tenor publish ... disaggregated=true prefill_replicas=1
  decode_replicas=1` on two model servers; `tenor ls` and GetStatus show the roles; the
  client library reaches only the decode replica, which prefills on the prefill replica it
  learns from WatchLoc, and answers as an interleaved replica does.
- Manual (`--prefill-from`): two prefill model servers and one decode model server; one
  prefill server is killed -9 mid-traffic: no request fails, and the decode server's KV
  cache is empty again once idle."""

from __future__ import annotations

import re
import threading

import grpc
import httpx

from tenor.proto import lm_pb2, lm_pb2_grpc
from tests.fakes.cell import wait_until
from tests.fakes.token import bearer
from tests.integration.cell_processes import (
    CONFIG,
    ModelServerProcess,
    cell_tls,
    client_for,
    run_cli,
    running_cell,
)

CELL = "/tenor/disagg"
MODEL = f"{CELL}/lm"
PROMPT = "a long shared prompt that spans several KV blocks of sixteen tokens each, "


def generate(root: str, address: str, text: str) -> str:
    with grpc.secure_channel(address, cell_tls().channel_credentials()) as channel:
        reply = lm_pb2_grpc.LMServiceStub(channel).Generate(
            lm_pb2.GenerateRequest(
                model_key=MODEL, text=text, extra_inputs=lm_pb2.ExtraInputs(items={"per_example_max_decode_steps": 6})
            ),
            timeout=30,
            metadata=bearer(root, CELL),
        )
    return reply.texts[0].text


def metric(http: str, name: str, path: str = "/metrics") -> float:
    text = httpx.get(f"http://{http}{path}", timeout=5).text
    values = [float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)]
    assert values, f"{name} is not in {path}"
    return sum(values)


def test_prefill_server_killed_mid_traffic_fails_no_request_and_leaks_no_block(tmp_path):
    root = f"file://{tmp_path}"
    with running_cell(root, CELL, num_admins=1, num_servers=2) as cell:
        decode = ModelServerProcess(root, CELL)
        decode.args += ["--http-port", "0", "--prefill-from", ",".join(s.address for s in cell.servers)]
        with decode:
            published = run_cli(root, "publish", MODEL, CONFIG, "None", "3")
            assert published.returncode == 0, published.stderr
            cell.wait_replicas(MODEL, 3)
            http = decode.http_address
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
            wait_until(
                lambda: metric(http, "tenor:kv_cache_usage_perc", "/models/lm/metrics") == 0.0,
                10,
                "the decode server's KV cache to empty",
            )


def test_admin_places_prefill_and_decode_replicas_and_clients_reach_the_decode_one(tmp_path):
    root = f"file://{tmp_path}"
    greedy = {"per_example_max_decode_steps": 8, "temperature": 0.0}
    with running_cell(root, CELL, num_admins=1, num_servers=0) as cell:
        servers = [ModelServerProcess(root, CELL) for _ in range(2)]
        for server in servers:
            server.args += ["--http-port", "0"]
        with servers[0], servers[1]:
            http = {server.address: server.http_address for server in servers}
            published = run_cli(
                root,
                "publish",
                MODEL,
                CONFIG,
                "None",
                "2",
                "disaggregated=true",
                "prefill_replicas=1",
                "decode_replicas=1",
            )
            assert published.returncode == 0, published.stderr
            cell.wait_replicas(MODEL, 2)
            roles = {s.states()[MODEL].role: s.address for s in servers}
            assert set(roles) == {"prefill", "decode"}
            listed = run_cli(root, "ls", MODEL)
            assert listed.returncode == 0, listed.stderr
            assert f"{roles['prefill']} (prefill)" in listed.stdout and f"{roles['decode']} (decode)" in listed.stdout
            # The same config and seed interleaved, for the reference output.
            assert run_cli(root, "publish", f"{CELL}/interleaved", CONFIG, "None", "1").returncode == 0
            cell.wait_replicas(f"{CELL}/interleaved", 1)

            remote = f'tenor:disagg_prefills_total{{model="{MODEL}",where="remote"}}'
            decode_http, prefill_http = http[roles["decode"]], http[roles["prefill"]]
            tries = iter(range(1000))
            with client_for(root, MODEL) as model, client_for(root, f"{CELL}/interleaved") as reference:

                def first_remote() -> tuple[str, str] | None:
                    # Each try leads with a new block: a prompt the decode replica's prefix cache
                    # holds is not sent for prefill at all.
                    prompt = f"try {next(tries)}: {PROMPT}"
                    text = model.lm().generate(prompt, greedy)[0].text
                    return (prompt, text) if metric(decode_http, remote) >= 1 else None

                # The decode replica may serve before it has heard of the prefill replica (it then
                # prefills locally); within seconds its requests are prefilled remotely.
                prompt, got = wait_until(first_remote, 30, "a request prefilled on the prefill replica")
                assert got == reference.lm().generate(prompt, greedy)[0].text and got
                before = metric(decode_http, remote)
                for i in range(3):
                    prompt = f"request {i}: {PROMPT}"
                    want = reference.lm().generate(prompt, greedy)[0].text
                    assert model.lm().generate(prompt, greedy)[0].text == want
            assert metric(decode_http, remote) == before + 3  # every request reached the decode replica
            assert metric(prefill_http, "tenor:kv_transfers_sent_total") >= 4
            # No client request reached the prefill replica.
            assert metric(prefill_http, f'tenor:model_requests_ok_total{{model="{MODEL}"}}') == 0

"""Rotating the cell token under traffic: `tenor token rotate` on a live cell (admin + model
server processes, mTLS on) while a client generates in a loop. No call fails, and afterwards
the old token is refused everywhere."""

from __future__ import annotations

import time

import grpc

from tenor.auth.tokens import RELOAD_S
from tenor.proto import admin_pb2, admin_pb2_grpc, modelet_pb2, modelet_pb2_grpc
from tests.fakes.token import cell_token
from tests.integration.cell_processes import CONFIG, Traffic, cell_tls, client_for, run_cli, running_cell

CELL = "/tenor/rotate"
MODEL = f"{CELL}/lm"


def _code(address: str, call, token: str) -> grpc.StatusCode:
    with grpc.secure_channel(address, cell_tls().channel_credentials()) as channel:
        try:
            call(channel, [("authorization", f"Bearer {token}")])
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def _eventually(code_now, periods: float = 5.0) -> grpc.StatusCode:
    """The call's code once it is no longer OK, or OK after `periods` token reloads."""
    deadline = time.monotonic() + periods * RELOAD_S
    code = code_now()
    while code == grpc.StatusCode.OK and time.monotonic() < deadline:
        time.sleep(0.1)
        code = code_now()
    return code


def _list(channel, metadata):
    admin_pb2_grpc.AdminStub(channel).List(admin_pb2.ListRequest(), timeout=5, metadata=metadata)


def _status(channel, metadata):
    modelet_pb2_grpc.ModeletStub(channel).GetStatus(modelet_pb2.GetStatusRequest(), timeout=5, metadata=metadata)


def test_rotation_under_traffic_loses_no_call(tmp_path) -> None:
    root = f"file://{tmp_path}"
    with running_cell(root, CELL, num_admins=1, num_servers=1) as cell:
        published = run_cli(root, "publish", MODEL, CONFIG, "None", "1")
        assert published.returncode == 0, published.stderr
        cell.wait_replicas(MODEL, 1)
        old = cell_token(root, CELL)
        with client_for(root, MODEL) as model, Traffic(model) as traffic:
            traffic.wait_ok(3)
            # A grace of 3 reload periods: under a busy suite a server's reload thread can run late.
            rotated = run_cli(root, "token", "rotate", "--cell", CELL, "--grace", "3", tls=False)
            assert rotated.returncode == 0, rotated.stderr
            traffic.wait_ok(5)
            listed = run_cli(root, "ls", MODEL)  # a fresh process reads the new token from the root
        assert traffic.failures == [] and traffic.ok >= 8
        assert listed.returncode == 0, listed.stderr
        new = cell_token(root, CELL)
        assert new != old
        admin, server = cell.leader().address, cell.servers[0].address
        # Each process re-reads the token every RELOAD_S: the old one goes within a period or two
        # of the last step (sooner than the traffic above takes when the model is fast).
        assert _eventually(lambda: _code(admin, _list, old)) == grpc.StatusCode.UNAUTHENTICATED
        assert _eventually(lambda: _code(server, _status, old)) == grpc.StatusCode.UNAUTHENTICATED
        assert _code(admin, _list, new) == _code(server, _status, new) == grpc.StatusCode.OK


def test_rotate_needs_a_token_to_replace_and_a_sane_grace(tmp_path) -> None:
    no_token = run_cli(f"file://{tmp_path}", "token", "rotate", "--cell", CELL, tls=False)
    assert no_token.returncode == 2 and "has no token" in no_token.stderr and no_token.stderr.count("\n") == 1
    short = run_cli(f"file://{tmp_path}", "token", "rotate", "--cell", CELL, "--grace", "0.5", tls=False)
    assert short.returncode == 2 and "--grace must be more than 1" in short.stderr

"""A cell with one model-server group of 2 (leader + worker, the worker configured through
LeaderWorkerSet's environment) and one single-process model server, on real processes.

test.LmSpmdRandom (requires a group of 2) lands on the group and generates; `tenor ls` marks
the group. Then test.TinyLlamaRandom (1 or 2 ranks) runs on both; kill -9 the worker mid-
traffic: the leader notices within seconds, fails what is in flight with UNAVAILABLE (the
client retries on the other replica), leaves the cell and exits; nothing is left running."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

from tests.fakes.cell import REPO_ROOT, AdminProcess, child_env, free_port, wait_until
from tests.fakes.tls import tls_flags
from tests.integration.cell_processes import (
    ModelServerProcess,
    Traffic,
    cell_credentials,
    cell_tls,
    client_for,
    run_cli,
)

CELL = "/tenor/gtest"
SPMD = f"{CELL}/spmd"
TINY = f"{CELL}/tiny"

pytestmark = pytest.mark.slow


class GroupWorker:
    """Rank 1 of a group: `tenor model-server serve` with LWS_* variables instead of flags."""

    def __init__(self, root: str, leader: str) -> None:
        env = {**child_env(), "LWS_LEADER_ADDRESS": leader, "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
        self._log = tempfile.NamedTemporaryFile(prefix="tenor-group-worker-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tenor.cli.main", "model-server", "serve", "--cell", CELL, "--root", root],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=env,
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()
        os.unlink(self._log.name)


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    root = f"file://{tmp_path_factory.mktemp('root')}"
    group_port = free_port()
    admin = AdminProcess(root, CELL, extra_args=tuple(tls_flags(cell_tls()))).start()
    admin.wait_leader()
    single = ModelServerProcess(root, CELL)
    leader = ModelServerProcess(root, CELL)
    leader.args += [
        "--group-size",
        "2",
        "--group-rank",
        "0",
        "--group-leader",
        f"127.0.0.1:{group_port}",
        "--group-timeout",
        "5",
    ]
    worker = GroupWorker(root, f"127.0.0.1:{group_port}")
    single.__enter__()
    leader.__enter__()
    try:
        yield root, admin, single, leader, worker
    finally:
        for proc in (single, leader):
            proc.__exit__(None, None, None)
        worker.kill()
        admin.__exit__(None, None, None)


def admin_client(root: str):
    from tenor.client.admin_client import AdminClient

    return AdminClient(root, CELL, timeout_s=30, credentials=cell_credentials())


def test_spmd_model_lands_on_the_group_and_generates(cell):
    root, _, _single, leader, _ = cell
    published = run_cli(root, "publish", SPMD, "test.LmSpmdRandom", "None", "1")
    assert published.returncode == 0, published.stderr
    admin = admin_client(root)
    addresses = wait_until(lambda: admin.list(SPMD)[0].addresses or None, 90, "the spmd replica")
    assert list(addresses) == [leader.address]
    generated = run_cli(root, "lm.generate", "--extra", "per_example_max_decode_steps:4", SPMD, "5,6,7")
    assert generated.returncode == 0, generated.stderr + leader.output()
    assert re.search(r"\b\d+,\d+,\d+,\d+\b", generated.stdout), generated.stdout  # ids in, ids out
    # The SAX walkthrough's text prompt: read as text (UTF-8 bytes), answered in text.
    in_text = run_cli(
        root, "lm.generate", "--extra", "per_example_max_decode_steps:4", SPMD, "Q: Who is Harry Potter's mother? A: "
    )
    assert in_text.returncode == 0, in_text.stderr + leader.output()
    assert not re.search(r"\b\d+,\d+,\d+,\d+\b", in_text.stdout), in_text.stdout
    listed = run_cli(root, "ls", SPMD)
    assert listed.returncode == 0 and f"{leader.address} (group of 2)" in listed.stdout
    unpublished = run_cli(root, "unpublish", SPMD)
    assert unpublished.returncode == 0, unpublished.stderr


def test_worker_killed_mid_traffic_group_leaves_and_retries_succeed(cell):
    root, _, single, leader, worker = cell
    published = run_cli(root, "publish", TINY, "test.TinyLlamaRandom", "None", "2")
    assert published.returncode == 0, published.stderr
    admin = admin_client(root)
    wait_until(lambda: len(admin.list(TINY)[0].addresses) == 2 or None, 120, "2 tiny replicas")
    with client_for(root, TINY) as client, Traffic(client) as traffic:
        traffic.wait_ok(3)
        worker.proc.kill()
        killed = time.monotonic()
        try:
            leader.proc.wait(30)  # the leader leaves the cell and exits by itself
        except subprocess.TimeoutExpired:
            pytest.fail(f"the leader did not exit within 30 s of its worker's death:\n{leader.output()}")
        left_s = time.monotonic() - killed
        wait_until(
            lambda: list(admin.list(TINY)[0].addresses) == [single.address] or None, 30, "the group's replica dropped"
        )
        traffic.wait_ok(3)
    assert left_s < 10, leader.output()
    assert leader.proc.returncode == 1, leader.output()
    assert traffic.failures == [], leader.output()
    assert worker.proc.poll() is not None and leader.proc.poll() is not None  # no orphans

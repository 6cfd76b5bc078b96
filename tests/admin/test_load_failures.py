"""Loads that fail are reported with their reason and retried elsewhere a bounded number of
times; checkpoint updates reload replicas one at a time."""

from __future__ import annotations

import time

import grpc
import pytest

from tenor.client.admin_client import AdminClient, AdminError
from tenor.proto import common_pb2
from tests.fakes.cell import AdminProcess, wait_until
from tests.fakes.modelet import FakeModelServer

CELL = "/tenor/lf"
TINY = "test.TinyLlamaRandom"
GPTJ = "test.TinyGPTJRandom"


@pytest.fixture
def cell(tmp_path):
    root = f"file://{tmp_path}"
    with AdminProcess(root, CELL, max_load_attempts=2) as admin:
        admin.wait_leader()
        client = AdminClient(root, CELL, timeout_s=10)
        yield root, client
        client.close()


def test_failed_loads_show_their_reason_and_stop_after_max_attempts(cell) -> None:
    root, client = cell
    servers = [FakeModelServer(root, CELL, fail_configs=(GPTJ,)).start() for _ in range(3)]
    try:
        client.publish("/tenor/lf/bad", GPTJ, None, 1)
        with pytest.raises(AdminError) as info:
            client.wait_for_ready("/tenor/lf/bad", 1, timeout_s=10)
        assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "out of fake memory" in str(info.value)
        (listed,) = client.list("/tenor/lf/bad")
        assert listed.gave_up and "out of fake memory" in listed.failure_reason
        assert "gave up" in listed.shortfall
        # Two attempts (max_load_attempts=2) on two different servers, none on the third, none repeated.
        loads = sorted(s.modelet.loads["/tenor/lf/bad"] for s in servers)
        assert loads == [0, 1, 1]
        failed = [r for r in listed.replicas if r.status == common_pb2.FAILED]
        assert len(failed) == 2 and all("out of fake memory" in r.failure_reason for r in failed)

        # Another model on the same servers is unaffected.
        client.publish("/tenor/lf/good", TINY, None, 3)
        assert len(client.wait_for_ready("/tenor/lf/good", 3, timeout_s=10)) == 3
    finally:
        for s in servers:
            s.kill()


def test_checkpoint_update_reloads_one_replica_at_a_time(cell) -> None:
    root, client = cell
    with FakeModelServer(root, CELL, load_delay_s=0.3) as s1, FakeModelServer(root, CELL, load_delay_s=0.3) as s2:
        client.publish("/tenor/lf/lm", TINY, "/ckpt/a", 2)
        client.wait_for_ready("/tenor/lf/lm", 2, timeout_s=10)
        serving_during_update = []

        def updated() -> bool:
            serving_during_update.append(len(client.list("/tenor/lf/lm")[0].addresses))
            return all(
                s.modelet.models["/tenor/lf/lm"].checkpoint == "/ckpt/b"
                and s.modelet.status_of("/tenor/lf/lm") == common_pb2.LOADED
                for s in (s1, s2)
            )

        client.update("/tenor/lf/lm", checkpoint="/ckpt/b")
        wait_until(updated, 15, "both replicas on the new checkpoint", interval_s=0.02)
        assert min(serving_during_update) >= 1  # never both down at once
        assert (s1.modelet.updates["/tenor/lf/lm"], s2.modelet.updates["/tenor/lf/lm"]) == (1, 1)
        assert (s1.modelet.loads["/tenor/lf/lm"], s2.modelet.loads["/tenor/lf/lm"]) == (1, 1)

        # A bad checkpoint fails on the first replica; the roll halts and the other keeps serving.
        client.update("/tenor/lf/lm", checkpoint="bad/ckpt")
        wait_until(
            lambda: "checkpoint bad/ckpt not found" in client.list("/tenor/lf/lm")[0].failure_reason,
            10,
            "the failure to show",
        )
        time.sleep(1.0)  # several heartbeats: nothing else may be touched
        (listed,) = client.list("/tenor/lf/lm")
        updates = sorted(s.modelet.updates["/tenor/lf/lm"] for s in (s1, s2))
        assert updates == [1, 2]
        (survivor,) = [s for s in (s1, s2) if s.modelet.updates["/tenor/lf/lm"] == 1]
        assert list(listed.addresses) == [survivor.address]
        assert survivor.modelet.models["/tenor/lf/lm"].checkpoint == "/ckpt/b"

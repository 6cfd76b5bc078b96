"""Crashes: a model server dies (its replica is re-placed), the active admin dies (a
standby takes over with the state intact and adopts loaded replicas without reloading)."""

from __future__ import annotations

import threading

from tenor.client.admin_client import AdminClient
from tests.fakes.cell import AdminProcess, wait_until
from tests.fakes.etcd import etcd_root, etcd_server  # noqa: F401
from tests.fakes.modelet import FakeModelServer

CELL = "/tenor/fo"
MODEL = "/tenor/fo/lm"
TINY = "test.TinyLlamaRandom"


def test_dead_model_server_is_dropped_and_its_replica_replaced(tmp_path) -> None:
    root = f"file://{tmp_path}"
    with AdminProcess(root, CELL) as admin, FakeModelServer(root, CELL) as s1, FakeModelServer(root, CELL) as s2:
        admin.wait_leader()
        client = AdminClient(root, CELL, timeout_s=10)
        client.publish(MODEL, TINY, None, 2)
        client.wait_for_ready(MODEL, 2, timeout_s=10)
        with FakeModelServer(root, CELL) as s3:
            wait_until(lambda: s3.address in {s.address for s in client.stats().servers}, 10, "s3 to join")
            s1.kill()
            wait_until(lambda: s1.address not in {s.address for s in client.stats().servers}, 10, "s1 dropped")
            ready = client.wait_for_ready(MODEL, 2, timeout_s=10)
            assert sorted(ready) == sorted([s2.address, s3.address])
            assert s2.modelet.loads[MODEL] == 1  # the survivor was not reloaded
        client.close()


def _failover(root: str, etcd_ttl: int | None) -> None:
    with AdminProcess(root, CELL, etcd_ttl=etcd_ttl) as a1, AdminProcess(root, CELL, etcd_ttl=etcd_ttl) as a2:
        first = wait_until(lambda: next((a for a in (a1, a2) if a.is_leader()), None), 15, "a leader")
        standby = a2 if first is a1 else a1
        standby.wait_serving()
        with FakeModelServer(root, CELL) as s1, FakeModelServer(root, CELL) as s2:
            client = AdminClient(root, CELL, timeout_s=20)
            client.publish(MODEL, TINY, None, 2, {"max_batch_size": "2"})
            client.wait_for_ready(MODEL, 2, timeout_s=10)
            watch = client.watch_loc(MODEL)
            updates = []
            reader = threading.Thread(target=lambda: updates.extend(watch), daemon=True)
            reader.start()
            wait_until(lambda: updates and len(updates[-1].addresses) == 2, 10, "the watch to see 2 replicas")
            first_admin = updates[-1].admin_id

            first.kill()
            standby.wait_leader(timeout_s=20)
            (listed,) = client.list(MODEL)  # follows the new leader through the root
            assert listed.model.requested_replicas == 2 and dict(listed.model.overrides) == {"max_batch_size": "2"}
            assert sorted(client.wait_for_ready(MODEL, 2, timeout_s=15)) == sorted([s1.address, s2.address])
            wait_until(
                lambda: updates[-1].admin_id != first_admin and len(updates[-1].addresses) == 2,
                15,
                "the watch to follow the new admin",
            )
            assert next(u for u in updates if u.admin_id != first_admin).reset  # a fresh full set first
            # Adopted, not reloaded.
            assert s1.modelet.loads[MODEL] == 1 and s2.modelet.loads[MODEL] == 1

            client.update(MODEL, replicas=1)  # the new leader accepts writes
            wait_until(lambda: len(client.list(MODEL)[0].replicas) == 1, 10, "one replica")
            watch.close()
            reader.join(timeout=5)
            client.close()


def test_standby_takes_over_on_file_root(tmp_path) -> None:
    _failover(f"file://{tmp_path}", None)


def test_standby_takes_over_on_etcd_root(etcd_root: str) -> None:  # noqa: F811
    _failover(etcd_root, 2)

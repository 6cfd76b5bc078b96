"""The cell on an etcd:// root (a real etcd on loopback), on real processes: 2 admins and
2 model servers; publish test.TinyLlamaRandom with 2 replicas, generate through the CLI,
then kill the active admin and one model server mid-traffic: no request fails, a standby
takes over (its lease-based election) with the published state intact."""

from __future__ import annotations

import uuid

from tests.fakes.etcd import etcd_server  # noqa: F401  (fixture)
from tests.integration.cell_processes import (
    CONFIG,
    Traffic,
    client_for,
    run_cli,
    running_cell,
    wait_until_leader_changes,
)

CELL = "/tenor/etcdtest"
MODEL = f"{CELL}/lm"


def test_publish_generate_and_failover_on_etcd(etcd_server):  # noqa: F811
    root = etcd_server.root(f"itest-{uuid.uuid4().hex[:8]}")
    with running_cell(root, CELL, num_admins=2, num_servers=2, etcd_ttl=2) as cell:
        published = run_cli(root, "publish", MODEL, CONFIG, "None", "2")
        assert published.returncode == 0, published.stderr
        cell.wait_replicas(MODEL, 2)

        generated = run_cli(root, "lm.generate", "--extra", "per_example_max_decode_steps:4", MODEL, "hi")
        assert generated.returncode == 0, generated.stderr
        assert "GENERATE" in generated.stdout and float(generated.stdout.splitlines()[3].rsplit("|", 2)[1]) < 0

        with client_for(root, MODEL) as client, Traffic(client) as traffic:
            traffic.wait_ok(3)
            leader = cell.leader()
            leader.kill()
            wait_until_leader_changes(cell, leader)
            (listed,) = cell.admin.list(MODEL)
            assert (listed.model.config_name, listed.model.requested_replicas) == (CONFIG, 2)
            traffic.wait_ok(3)

            # The new leader learns the serving replicas again as the servers re-join.
            victim = cell.server_at(cell.wait_replicas(MODEL, 2)[0])
            victim.kill()
            cell.wait_replicas(MODEL, 1, without=victim.address)  # no spare server: one replica left
            traffic.wait_ok(5)
        assert traffic.failures == []

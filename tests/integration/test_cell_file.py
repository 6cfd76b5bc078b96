"""The cell on a file:// root, on real processes: 2 admins, 3 model servers (one spare),
test.TinyLlamaRandom published with 2 replicas. The tests run in order on one cell:
generate through the CLI and the client; replicas 2->1->2 keep the survivor loaded;
a model server killed mid-traffic fails no request and its replica is re-placed; the
active admin killed mid-traffic: a standby takes over with the state intact."""

from __future__ import annotations

import math

import pytest

from tests.integration.cell_processes import (
    CONFIG,
    LOADED,
    SHORT_GENERATE,
    Traffic,
    client_for,
    run_cli,
    running_cell,
    wait_until_leader_changes,
)

CELL = "/tenor/itest"
MODEL = f"{CELL}/lm"


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    root = f"file://{tmp_path_factory.mktemp('root')}"
    with running_cell(root, CELL, num_admins=2, num_servers=3) as cell:
        published = run_cli(root, "publish", MODEL, CONFIG, "None", "2")
        assert published.returncode == 0, published.stderr
        cell.wait_replicas(MODEL, 2)
        yield cell


@pytest.fixture(scope="module")
def client(cell):
    with client_for(cell.root, MODEL) as model:
        yield model


def test_generate_and_score_through_the_cli_and_the_client(cell, client):
    generated = run_cli(cell.root, "lm.generate", "-n", "2", "--extra", "per_example_max_decode_steps:4", MODEL, "hi")
    assert generated.returncode == 0, generated.stderr
    lines = generated.stdout.splitlines()
    assert lines[1].split("|")[1:3] == [" GENERATE ", " SCORE "] or "GENERATE" in lines[1]
    rows = [line for line in lines[3:] if line.startswith("|")]
    assert len(rows) == 2 and all(float(row.rsplit("|", 2)[1]) < 0 for row in rows)

    samples = client.lm().generate("hello", SHORT_GENERATE)
    assert len(samples) == 1 and samples[0].text and math.isfinite(samples[0].score) and samples[0].score < 0
    logps = client.lm().score("hello", [" world", " there"])
    assert len(logps) == 2 and all(math.isfinite(p) and p < 0 for p in logps)
    streamed = list(client.lm().generate_stream("hello", SHORT_GENERATE))
    assert 1 <= len(streamed) <= 4 and streamed[-1][0].scores[-1] < 0

    bad = run_cli(cell.root, "lm.generate", "--extra", "tempreature:1", MODEL, "hi")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "tempreature" in bad.stderr


def test_replicas_2_1_2_never_reload_the_surviving_replica(cell):
    before = {a: cell.server_at(a).states()[MODEL].loaded_at for a in cell.addresses(MODEL)}
    cell.admin.update(MODEL, replicas=1)
    (survivor,) = cell.wait_replicas(MODEL, 1)
    cell.admin.update(MODEL, replicas=2)
    after = cell.wait_replicas(MODEL, 2)
    assert survivor in after
    state = cell.server_at(survivor).states()[MODEL]
    assert state.status == LOADED and state.loaded_at == before[survivor]


def test_model_server_killed_mid_traffic_fails_no_request_and_is_replaced(cell, client):
    victim = cell.server_at(cell.addresses(MODEL)[0])
    with Traffic(client) as traffic:
        traffic.wait_ok(3)
        victim.kill()
        cell.wait_replicas(MODEL, 2, without=victim.address)  # re-placed on the spare server
        traffic.wait_ok(5)
    assert traffic.failures == []


def test_active_admin_killed_mid_traffic_standby_takes_over_with_state_intact(cell, client):
    leader = cell.leader()
    loaded_at = {a: cell.server_at(a).states()[MODEL].loaded_at for a in cell.addresses(MODEL)}
    with Traffic(client) as traffic:
        traffic.wait_ok(3)
        leader.kill()
        wait_until_leader_changes(cell, leader)
        (published,) = cell.admin.list(MODEL)
        assert (published.model.config_name, published.model.requested_replicas) == (CONFIG, 2)
        assert set(cell.wait_replicas(MODEL, 2)) == set(loaded_at)
        traffic.wait_ok(5)
    assert traffic.failures == []
    # The new admin adopted the serving replicas instead of reloading them.
    assert {a: cell.server_at(a).states()[MODEL].loaded_at for a in loaded_at} == loaded_at
    listed = run_cli(cell.root, "ls", MODEL)
    assert listed.returncode == 0 and CONFIG in listed.stdout

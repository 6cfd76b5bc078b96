"""The admin places prefill and decode replicas (disaggregated serving): a real admin process
on a file:// root with fake model servers that report the role each Load asked for."""

from __future__ import annotations

import grpc
import pytest

from tenor.client.admin_client import AdminClient, AdminError
from tests.fakes.cell import AdminProcess, wait_until
from tests.fakes.modelet import FakeModelServer

CELL = "/tenor/test"
MODEL = "/tenor/test/lm"
TINY = "test.TinyLlamaRandom"
SPLIT = {"disaggregated": "true", "prefill_replicas": "1", "decode_replicas": "1"}


@pytest.fixture
def client(tmp_path):
    root = f"file://{tmp_path}"
    with AdminProcess(root, CELL) as process:
        process.wait_leader()
        c = AdminClient(root, CELL, timeout_s=10)
        yield root, c
        c.close()


def roles(client: AdminClient) -> dict[str, str]:
    return {r.address: r.role for r in client.list(MODEL)[0].replicas}


def first_addresses(client: AdminClient, role: str = "") -> tuple[str, ...]:
    watch = client.watch_loc(MODEL, role)
    try:
        return next(iter(watch)).addresses
    finally:
        watch.close()


def test_publish_places_roles_watchloc_splits_them_and_update_changes_them(client) -> None:
    root, admin = client
    with FakeModelServer(root, CELL) as s1, FakeModelServer(root, CELL) as s2, FakeModelServer(root, CELL) as s3:
        servers = {s.address: s for s in (s1, s2, s3)}
        admin.publish(MODEL, TINY, None, 2, SPLIT)
        assert len(admin.wait_for_ready(MODEL, 2, timeout_s=10)) == 2  # counts both roles
        placed = roles(admin)
        assert sorted(placed.values()) == ["decode", "prefill"]
        prefill = next(a for a, r in placed.items() if r == "prefill")
        decode = next(a for a, r in placed.items() if r == "decode")
        assert servers[prefill].modelet.models[MODEL].role == "prefill"
        assert servers[decode].modelet.models[MODEL].overrides == {}  # the split is the admin's, not the engine's
        assert sorted(admin.list(MODEL)[0].addresses) == sorted(placed)
        # Clients are told only of the decode replica; decode replicas ask for the prefill ones.
        assert first_addresses(admin) == (decode,)
        assert first_addresses(admin, "prefill") == (prefill,)

        admin.update(MODEL, overrides={"decode_replicas": "2"})  # REPLICAS follows the split
        assert admin.list(MODEL)[0].model.requested_replicas == 3
        wait_until(
            lambda: (
                sorted(roles(admin).values()) == ["decode", "decode", "prefill"]
                and len(admin.list(MODEL)[0].addresses) == 3
            ),
            10,
            "a second decode replica",
        )
        assert roles(admin)[prefill] == "prefill" and servers[prefill].modelet.loads[MODEL] == 1

        admin.update(MODEL, replicas=2, overrides={"disaggregated": "", "prefill_replicas": "", "decode_replicas": ""})
        wait_until(
            lambda: sorted(roles(admin).values()) == ["both", "both"] and len(admin.list(MODEL)[0].addresses) == 2,
            15,
            "two interleaved replicas",
        )
        assert len(first_addresses(admin)) == 2


BAD = [
    ("publish", 2, {"prefill_replicas": "1", "decode_replicas": "1"}, "prefill_replicas needs disaggregated=true"),
    ("publish", 2, {"disaggregated": "true"}, "needs prefill_replicas=P and decode_replicas=D"),
    ("publish", 1, {**SPLIT, "prefill_replicas": "-1", "decode_replicas": "2"}, "prefill_replicas must be >= 1"),
    ("publish", 1, {**SPLIT, "decode_replicas": "0"}, "decode_replicas must be >= 1"),
    ("publish", 2, {**SPLIT, "decode_replicas": "one"}, "decode_replicas must be a whole number"),
    ("publish", 3, SPLIT, "replica count 3 must equal prefill_replicas + decode_replicas (1 + 1 = 2)"),
    ("publish", 2, {**SPLIT, "disaggregated": "yes"}, "disaggregated must be true or false"),
    ("spmd", 2, SPLIT, "runs only on model-server groups of 2"),
    ("update", 5, {}, "replica count 5 must equal prefill_replicas + decode_replicas"),
    ("update", None, {"disaggregated": "false"}, "needs disaggregated=true"),
]


@pytest.mark.parametrize("verb,replicas,overrides,message", BAD)
def test_bad_role_input_is_invalid_argument_in_one_line(client, verb, replicas, overrides, message) -> None:
    _, admin = client
    with pytest.raises(AdminError) as info:
        if verb == "update":
            admin.publish(MODEL, TINY, None, 2, SPLIT)
            admin.update(MODEL, replicas=replicas, overrides=overrides)
        else:
            config = "test.LmSpmdRandom" if verb == "spmd" else TINY
            admin.publish("/tenor/test/x", config, None, replicas, overrides)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert message in str(info.value) and "\n" not in str(info.value)

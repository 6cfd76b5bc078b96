"""The etcd root against a real etcd on loopback."""

from __future__ import annotations

import time

import pytest

from tenor.admin.naming import CellName
from tenor.admin.store import AdminLocation, CellState, LostLeadership, ModelSpec, StoreError, list_cells, open_store
from tenor.admin.store.etcd import EtcdCellStore, EtcdLeadership
from tests.fakes.etcd import etcd_root, etcd_server  # noqa: F401

CELL = CellName("c")
SPEC = ModelSpec.make("/tenor/c/lm", "test.TinyLlamaRandom", None, 2, {"k": "v"})


def test_lease_election_state_and_fencing(etcd_root: str) -> None:  # noqa: F811
    a = open_store(etcd_root, CELL, etcd_ttl_s=1)
    b = open_store(etcd_root, CELL, etcd_ttl_s=1)
    a.ensure_cell()
    assert list_cells(etcd_root) == [CELL]
    lead_a = a.try_lead(AdminLocation("h:1", "a"))
    assert isinstance(lead_a, EtcdLeadership) and b.try_lead(AdminLocation("h:2", "b")) is None
    assert b.read_location().admin_id == "a"
    state = CellState().with_model(SPEC)
    a.save_state(state, lead_a)
    assert b.load_state() == state

    # a stops renewing: its lease expires, b takes over, and a's late writes are refused.
    time.sleep(2.5)
    lead_b = b.try_lead(AdminLocation("h:2", "b"))
    assert lead_b is not None and a.read_location().admin_id == "b"
    with pytest.raises(LostLeadership):
        lead_a.keepalive()
    with pytest.raises(LostLeadership):
        a.save_state(CellState(), lead_a)
    assert b.load_state() == state

    # Releasing hands over at once, without waiting for the TTL.
    lead_b.keepalive()
    lead_b.release()
    assert a.try_lead(AdminLocation("h:1", "a")) is not None
    a.close()
    b.close()


def test_unreachable_etcd_is_a_store_error() -> None:
    store = EtcdCellStore("127.0.0.1:1", "", CELL)
    with pytest.raises(StoreError, match="unreachable"):
        store.read_location()
    store.close()

from __future__ import annotations

import pytest

from tenor.admin.naming import CellName
from tenor.admin.store import AdminLocation, CellState, LostLeadership, ModelSpec, list_cells, open_store
from tenor.admin.store.memory import reset_memory_roots


@pytest.fixture(autouse=True)
def fresh_roots():
    reset_memory_roots()
    yield
    reset_memory_roots()


def test_memory_roots_are_shared_by_name_and_elect_one_leader() -> None:
    a = open_store("memory://r", CellName("c"))
    b = open_store("memory://r", CellName("c"))
    other = open_store("memory://elsewhere", CellName("c"))
    lead = a.try_lead(AdminLocation("h:1", "a"))
    assert lead is not None and b.try_lead(AdminLocation("h:2", "b")) is None
    assert other.try_lead(AdminLocation("h:3", "o")) is not None
    state = CellState().with_model(ModelSpec.make("/tenor/c/m", "test.TinyLlamaRandom", None, 1))
    a.save_state(state, lead)
    assert b.load_state() == state and b.read_location().admin_id == "a"
    lead.revoke()
    with pytest.raises(LostLeadership):
        lead.keepalive()
    with pytest.raises(LostLeadership):
        a.save_state(CellState(), lead)
    assert b.try_lead(AdminLocation("h:2", "b")) is not None


def test_list_memory_cells() -> None:
    open_store("memory://r", CellName("z")).ensure_cell()
    open_store("memory://r", CellName("y"))  # opened, never configured
    assert list_cells("memory://r") == [CellName("z")]

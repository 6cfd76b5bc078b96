from __future__ import annotations

import asyncio

import pytest

from tenor.admin.election import Election
from tenor.admin.manager import ManagerOptions
from tenor.admin.naming import CellName
from tenor.admin.store import AdminLocation, open_store
from tenor.admin.store.memory import reset_memory_roots


@pytest.fixture(autouse=True)
def fresh_roots():
    reset_memory_roots()
    yield
    reset_memory_roots()


def test_one_leads_the_other_waits_and_takes_over_when_the_lead_is_lost() -> None:
    async def scenario() -> None:
        store = open_store("memory://e", CellName("c"))
        first = Election(store, AdminLocation("h:1", "one"), retry_s=0.01)
        second = Election(store, AdminLocation("h:2", "two"), retry_s=0.01)
        lead = await first.acquire()
        waiting = asyncio.ensure_future(second.acquire())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        holding = asyncio.ensure_future(first.hold(lead, asyncio.Event()))
        lead.revoke()  # as if its lease expired
        assert "another admin" in await asyncio.wait_for(holding, 2)
        second_lead = await asyncio.wait_for(waiting, 2)
        assert store.read_location().admin_id == "two"
        lost = asyncio.Event()
        holding = asyncio.ensure_future(second.hold(second_lead, lost))
        lost.set()  # a write found out first
        assert "another leader" in await asyncio.wait_for(holding, 2)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"poll_interval_s": 0}, "poll_interval_s must be > 0"),
        ({"poll_interval_s": 2, "prune_after_s": 1}, "prune_after_s (1) must be >= poll_interval_s (2)"),
        ({"max_load_attempts": 0}, "max_load_attempts must be >= 1"),
        ({"startup_grace_s": -1}, "startup_grace_s must be >= 0"),
    ],
)
def test_manager_options_are_checked(kwargs, message) -> None:
    with pytest.raises(ValueError) as info:
        ManagerOptions(**kwargs)
    assert message in str(info.value)


def test_election_retry_must_be_positive() -> None:
    with pytest.raises(ValueError, match="retry_s must be > 0"):
        Election(open_store("memory://e", CellName("c")), AdminLocation("h:1", "x"), retry_s=0)

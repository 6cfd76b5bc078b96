"""A model server that leads a model-server group (rank 0): the group forms before the server
joins the cell, the server holds one model at a time (its workers hold one shard each), and a
lost rank makes the server leave the cell and exit so that the admin re-places the replica.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from tenor.engine.factory import EngineOptions
from tenor.server.modelet_service import LoadFailedError, ModelSpec, ModelTable, Status

if TYPE_CHECKING:
    from tenor.dist.leader import GroupLeader

log = logging.getLogger(__name__)
WATCH_INTERVAL_S = 0.2


class GroupModelTable(ModelTable):
    """A ModelTable whose engines shard their model over the group: one model at a time."""

    async def load(self, name: str, spec: ModelSpec) -> None:
        others = [
            m.name
            for m in self.models()
            if m.name != name and m.status in (Status.LOADING, Status.LOADED, Status.UNLOADING)
        ]
        if others:
            raise LoadFailedError(f"this model-server group already serves {others[0]}; a group holds one model")
        await super().load(name, spec)


async def form_group_table(config) -> tuple[GroupLeader, GroupModelTable]:
    """Forms the group (waits for every rank, within the join timeout) and a table that uses it."""
    from tenor.dist.leader import GroupLeader

    leader = await asyncio.to_thread(GroupLeader, config.group)
    options = EngineOptions(group=leader, device=config.group.device)
    table = GroupModelTable(options=options, drain_timeout_s=config.drain_timeout_s)
    return leader, table


async def watch_group(leader, stopped: asyncio.Event) -> None:
    """Sets `stopped` once the group loses a rank (a failed step or heartbeat)."""
    while not leader.broken:
        await asyncio.sleep(WATCH_INTERVAL_S)
    log.error("a rank of this model-server group is gone: leaving the cell")
    stopped.set()

"""Leader election over a cell root: any number of admins campaign, one leads.

The root backend does the real work (an flock on file://, a leased key on etcd://); this
module runs the campaign and keeps the lead alive from the admin's event loop, blocking
calls off the loop so a slow root never stalls RPCs.
"""

from __future__ import annotations

import asyncio
import logging

from tenor.admin.store import AdminLocation, CellStore, Leadership, LostLeadership, StoreError

log = logging.getLogger(__name__)


class Election:
    def __init__(self, store: CellStore, location: AdminLocation, retry_s: float = 0.5) -> None:
        if retry_s <= 0:
            raise ValueError(f"retry_s must be > 0, got {retry_s}")
        self.store = store
        self.location = location
        self.retry_s = retry_s

    async def acquire(self) -> Leadership:
        """Returns once this admin leads; until then retries every `retry_s`."""
        last_error = ""
        while True:
            try:
                leadership = await asyncio.to_thread(self.store.try_lead, self.location)
            except StoreError as exc:
                if str(exc) != last_error:
                    log.warning("cannot campaign for %s: %s", self.store.cell, exc)
                last_error, leadership = str(exc), None
            if leadership is not None:
                return leadership
            await asyncio.sleep(self.retry_s)

    async def hold(self, leadership: Leadership, lost: asyncio.Event) -> str:
        """Renews the lead until it is lost (or `lost` is set by someone who found out); returns why."""
        while True:
            try:
                await asyncio.to_thread(leadership.keepalive)
            except LostLeadership as exc:
                return str(exc)
            try:
                await asyncio.wait_for(lost.wait(), leadership.keepalive_s)
                return "a write to the root found another leader"
            except TimeoutError:
                pass

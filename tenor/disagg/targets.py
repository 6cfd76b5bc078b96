"""Where a decode replica finds its model's prefill replicas: the admin's WatchLoc with
role "prefill", kept current in a background thread (tenor.client.location.LocationWatcher).

RemotePrefill reads `addresses()` at each request, so a prefill replica that joins is used
from its next request and one that goes away is skipped. While the admin is away the last
known set stays (the prefill replicas usually still serve); with none known, the decode
replica prefills locally, so requests still succeed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tenor.admin.roles import PREFILL
from tenor.client.location import LocationWatcher, Replicas, addresses_from

if TYPE_CHECKING:
    from tenor.client.admin_client import AdminClient, LocationWatch


class PrefillTargets:
    """One decode replica's view of one model's prefill replicas, until close()."""

    def __init__(self, model_name: str, admin: Callable[[], AdminClient]) -> None:
        self._admin = admin  # shared by the server's models, made on first use
        self._replicas = Replicas()
        self._lock = threading.Lock()
        self._watch: LocationWatch | None = None  # the current one, closed to end its stream
        self._closed = False
        self._watcher = LocationWatcher(model_name, self._addresses_from_admin, self._replicas).start()

    def addresses(self) -> list[str]:
        return list(self._replicas.addresses())

    def _addresses_from_admin(self, name: str) -> Iterator[tuple[str, ...]]:
        watch = self._admin().watch_loc(name, PREFILL)
        with self._lock:
            if self._closed:
                watch.close()
                return
            self._watch = watch
        yield from addresses_from(watch)

    def close(self) -> None:
        self._watcher.stop()
        with self._lock:
            self._closed = True
            if self._watch is not None:
                self._watch.close()

"""A model server's membership in its cell: `JoinLoop` joins at start, again when the admin
moves, and every `rejoin_s`. It lives with the model server; it only uses the admin client."""

from __future__ import annotations

import threading
import time

from tenor.admin.naming import CellName
from tenor.admin.store import StoreError
from tenor.auth.channels import CellAccess
from tenor.client.admin_client import AdminClient, AdminError
from tenor.proto import common_pb2


class JoinLoop:
    """A model server's membership: Join at start, at once when the admin moves, and every
    `rejoin_s` (Join is idempotent, so a server dropped after a network blip comes back)."""

    def __init__(
        self,
        root: str,
        cell: str | CellName,
        address: str,
        http_address: str,
        spec: common_pb2.ServerSpec,
        *,
        rejoin_s: float = 2.0,
        check_s: float = 0.25,
        access: CellAccess | None = None,
    ) -> None:
        self._client = AdminClient(root, cell, timeout_s=2.0, access=access)
        self._request = (address, http_address, spec)
        self.rejoin_s = rejoin_s
        self.check_s = check_s
        self._stop = threading.Event()
        self._joined = threading.Event()
        self.admin_id = ""
        self.last_error = ""
        self._thread = threading.Thread(target=self._run, name=f"join-{address}", daemon=True)

    def start(self) -> "JoinLoop":
        self._thread.start()
        return self

    def wait_joined(self, timeout_s: float) -> bool:
        return self._joined.wait(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._client.close()

    def _run(self) -> None:
        last_join = 0.0
        while not self._stop.is_set():
            try:
                location = self._client.location()
            except StoreError as exc:
                location, self.last_error = None, str(exc)
            moved = location is not None and location.admin_id != self.admin_id
            if location is not None and (moved or time.monotonic() - last_join >= self.rejoin_s):
                try:
                    self.admin_id = self._client.join(*self._request, timeout_s=min(2.0, self.rejoin_s))
                    last_join = time.monotonic()
                    self.last_error = ""
                    self._joined.set()
                except AdminError as exc:
                    self.last_error = str(exc)
            self._stop.wait(self.check_s)

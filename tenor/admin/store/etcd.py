"""A cell root in etcd: `etcd://HOST:PORT[/prefix]`.

Keys: `<prefix>/tenor/<cell>/{config, state, leader, token}` (guard `token` with etcd's own auth). The leader key holds
the active admin's location and is bound to a lease: created only if absent (a transaction on
create_revision == 0), renewed every `keepalive_s`, gone `ttl_s` after its admin dies.
State writes are fenced on that lease, so an admin that lost its lease cannot overwrite
what the new leader wrote. etcd acknowledges a put only once it is in its fsynced log.
"""

from __future__ import annotations

import json
import time

from tenor.admin.naming import CellName
from tenor.admin.store.base import AdminLocation, CellState, LostLeadership, StoreError
from tenor.admin.store.etcd_client import EtcdAccess, EtcdClient

DEFAULT_TTL_S = 3


class EtcdLeadership:
    def __init__(self, client: EtcdClient, lease: int, ttl_s: int) -> None:
        self._client = client
        self.lease = lease
        self.ttl_s = ttl_s
        # Renew well within the TTL: this machine may be busy and a late renewal loses the lead.
        self.keepalive_s = max(0.2, ttl_s / 4)
        self._deadline = time.monotonic() + ttl_s
        self._released = False

    def keepalive(self) -> None:
        if self._released:
            raise LostLeadership("leadership was released")
        sent_at = time.monotonic()
        try:
            ttl = self._client.lease_keepalive(self.lease)
        except StoreError as exc:
            # etcd unreachable: we are still the leader until our lease could have expired.
            if time.monotonic() >= self._deadline:
                raise LostLeadership(f"lease not renewed for {self.ttl_s}s: {exc}") from None
            return
        if ttl <= 0:
            raise LostLeadership("the leader lease expired")
        self._deadline = sent_at + ttl

    def release(self) -> None:
        if not self._released:
            self._released = True
            try:
                self._client.lease_revoke(self.lease)  # a standby takes over at once, not after the TTL
            except StoreError:
                pass


class EtcdCellStore:
    def __init__(
        self, endpoint: str, prefix: str, cell: CellName, ttl_s: int = DEFAULT_TTL_S, access: EtcdAccess = EtcdAccess()
    ) -> None:
        self.root = f"etcd://{endpoint}{prefix}"
        self.cell = cell
        self.ttl_s = ttl_s
        self._client = EtcdClient(endpoint, access=access)
        base = f"{prefix}/tenor/{cell.cell}"
        self._config_key = f"{base}/config".encode()
        self._state_key = f"{base}/state".encode()
        self._leader_key = f"{base}/leader".encode()
        self._token_key = f"{base}/token".encode()

    def ensure_cell(self) -> None:
        self._client.put_if_absent(self._config_key, json.dumps({"cell": str(self.cell)}).encode())

    def try_lead(self, location: AdminLocation) -> EtcdLeadership | None:
        if self._client.get(self._leader_key) is not None:
            return None  # cheap check first: standbys poll this often
        lease = self._client.lease_grant(self.ttl_s)
        if self._client.put_if_absent(self._leader_key, location.to_bytes(), lease):
            return EtcdLeadership(self._client, lease, self.ttl_s)
        self._client.lease_revoke(lease)
        return None

    def read_location(self) -> AdminLocation | None:
        kv = self._client.get(self._leader_key)
        return None if kv is None else AdminLocation.from_bytes(kv.value)

    def load_state(self) -> CellState:
        kv = self._client.get(self._state_key)
        if kv is None:
            return CellState()
        return CellState.from_bytes(kv.value, f"{self.root} key {self._state_key.decode()}")

    def save_state(self, state: CellState, leadership: EtcdLeadership) -> None:
        if not self._client.put_if_lease(self._leader_key, leadership.lease, self._state_key, state.to_bytes()):
            raise LostLeadership("the leader key is no longer ours; state not written")

    def read_token(self) -> str | None:
        kv = self._client.get(self._token_key)
        return None if kv is None else kv.value.decode(errors="replace")

    def create_token(self, text: str) -> bool:
        return self._client.put_if_absent(self._token_key, text.encode())

    def write_token(self, text: str) -> None:
        self._client.put(self._token_key, text.encode())

    def close(self) -> None:
        self._client.close()

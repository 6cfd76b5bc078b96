"""A small etcd v3 client over etcd's JSON gateway (`POST /v3/...`), with httpx.

The `etcd3` Python package is unmaintained and breaks with protobuf 7; the gateway ships
with every etcd since 3.3, so plain HTTP needs nothing more. Keys and values travel as
base64; int64 fields come back as JSON strings.
"""

from __future__ import annotations

import base64
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tenor.admin.store.base import StoreError


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass(frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


ACCESS_KEYS = ("ca", "cert", "key", "user", "password_file")


@dataclass(frozen=True)
class EtcdAccess:
    """etcd's own TLS (a CA to verify it; a client certificate when it demands one) and auth
    (a user whose password is read from a file, never from the root URL)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    user: str | None = None
    password_file: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("etcd root: cert and key go together")
        if (self.user is None) != (self.password_file is None):
            raise ValueError("etcd root: user and password_file go together")
        for path in (self.ca, self.cert, self.key, self.password_file):
            if path is not None and not Path(path).is_file():
                raise ValueError(f"etcd root: no such file {path}")

    @property
    def tls(self) -> bool:
        return self.ca is not None or self.cert is not None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca)
        if self.cert is not None and self.key is not None:
            context.load_cert_chain(self.cert, self.key)
        return context


class EtcdClient:
    def __init__(self, endpoint: str, timeout_s: float = 2.0, access: EtcdAccess = EtcdAccess()) -> None:
        self.endpoint = endpoint  # "host:port"
        self.access = access
        scheme = "https" if access.tls else "http"
        verify: ssl.SSLContext | bool = access.ssl_context() if access.tls else True
        self._http = httpx.Client(base_url=f"{scheme}://{endpoint}", timeout=timeout_s, verify=verify)
        self._auth_lock = threading.Lock()
        self._auth_token = ""

    def _authenticate(self) -> None:
        """etcd auth: trade the user's password for a token sent on every call."""
        assert self.access.user is not None and self.access.password_file is not None
        password = Path(self.access.password_file).read_text().strip()
        try:
            response = self._http.post("/v3/auth/authenticate", json={"name": self.access.user, "password": password})
        except httpx.HTTPError as exc:
            raise StoreError(f"etcd at {self.endpoint} unreachable: {exc}") from None
        if response.status_code != 200:
            raise StoreError(f"etcd at {self.endpoint} refused user {self.access.user}: {response.text[:200]}")
        with self._auth_lock:
            self._auth_token = str(response.json().get("token", ""))

    def _post(self, path: str, body: dict[str, object]) -> httpx.Response:
        headers = {"Authorization": self._auth_token} if self._auth_token else {}
        try:
            return self._http.post(f"/v3/{path}", json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise StoreError(f"etcd at {self.endpoint} unreachable: {exc}") from None

    def _call(self, path: str, body: dict[str, object]) -> dict[str, Any]:
        if self.access.user is not None and not self._auth_token:
            self._authenticate()
        response = self._post(path, body)
        if response.status_code == 401 and self.access.user is not None:
            self._authenticate()  # the token expired (etcd's simple tokens last minutes)
            response = self._post(path, body)
        if response.status_code != 200:
            raise StoreError(f"etcd at {self.endpoint} said {response.status_code} to {path}: {response.text[:200]}")
        return response.json()

    def get(self, key: bytes) -> KeyValue | None:
        kvs = self._call("kv/range", {"key": _b64(key)}).get("kvs") or []
        if not kvs:
            return None
        kv = kvs[0]
        return KeyValue(
            base64.b64decode(kv["key"]),
            base64.b64decode(kv.get("value", "")),
            int(kv.get("create_revision", 0)),
            int(kv.get("mod_revision", 0)),
            int(kv.get("lease", 0)),
        )

    def keys_with_prefix(self, prefix: bytes) -> list[bytes]:
        end = prefix[:-1] + bytes([prefix[-1] + 1])  # etcd's range end for "every key starting with prefix"
        kvs = self._call("kv/range", {"key": _b64(prefix), "range_end": _b64(end), "keys_only": True}).get("kvs") or []
        return sorted(base64.b64decode(kv["key"]) for kv in kvs)

    def put(self, key: bytes, value: bytes, lease: int = 0) -> None:
        body: dict[str, object] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        self._call("kv/put", body)

    def put_if_absent(self, key: bytes, value: bytes, lease: int = 0) -> bool:
        """Creates `key` only if it does not exist; True if this call created it."""
        put: dict[str, object] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            put["lease"] = str(lease)
        result = self._call(
            "kv/txn",
            {
                "compare": [{"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                "success": [{"request_put": put}],
            },
        )
        return bool(result.get("succeeded"))

    def put_if_lease(self, guard_key: bytes, lease: int, key: bytes, value: bytes) -> bool:
        """Writes `key` only while `guard_key` is held by `lease` (fencing a leader's writes)."""
        result = self._call(
            "kv/txn",
            {
                "compare": [{"key": _b64(guard_key), "target": "LEASE", "result": "EQUAL", "lease": str(lease)}],
                "success": [{"request_put": {"key": _b64(key), "value": _b64(value)}}],
            },
        )
        return bool(result.get("succeeded"))

    def delete(self, key: bytes) -> None:
        self._call("kv/deleterange", {"key": _b64(key)})

    def lease_grant(self, ttl_s: int) -> int:
        return int(self._call("lease/grant", {"TTL": str(ttl_s)})["ID"])

    def lease_keepalive(self, lease: int) -> int:
        """Renews the lease; returns its new TTL in seconds, 0 if it had already expired."""
        result = self._call("lease/keepalive", {"ID": str(lease)}).get("result") or {}
        return int(result.get("TTL", 0))

    def lease_revoke(self, lease: int) -> None:
        self._call("lease/revoke", {"ID": str(lease)})

    def close(self) -> None:
        self._http.close()

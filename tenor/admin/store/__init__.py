"""Cell roots: `file://DIR` (or a plain directory path), `etcd://HOST:PORT[/prefix]`, `memory://NAME`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

from tenor.admin.naming import CellName
from tenor.admin.store.base import (
    AdminLocation,
    CellState,
    CellStore,
    Leadership,
    LostLeadership,
    ModelSpec,
    StoreError,
)
from tenor.errors import UserError

ROOT_ENV = "TENOR_ROOT"

__all__ = [
    "AdminLocation",
    "CellState",
    "CellStore",
    "Leadership",
    "LostLeadership",
    "ModelSpec",
    "RootSpec",
    "StoreError",
    "list_cells",
    "open_store",
    "parse_root",
    "resolve_root",
    "ROOT_ENV",
]

_ETCD = re.compile(
    r"^etcd://(?P<host>[A-Za-z0-9_.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})"
    r"(?P<prefix>(/[A-Za-z0-9_.\-]+)*)/?(\?(?P<query>.*))?$"
)
_ETCD_OPTIONS = ("ca", "cert", "key", "user", "password_file")


@dataclass(frozen=True)
class RootSpec:
    kind: str  # "file", "etcd" or "memory"
    location: str  # directory, "host:port" or memory name
    prefix: str = ""  # etcd key prefix, "" or "/a/b"
    options: tuple[tuple[str, str], ...] = ()  # etcd: ?ca=&cert=&key=&user=&password_file=

    def etcd_access(self):
        from tenor.admin.store.etcd_client import EtcdAccess

        try:
            return EtcdAccess(**dict(self.options))
        except ValueError as exc:
            raise UserError(str(exc)) from None


def parse_root(root: str) -> RootSpec:
    if root.startswith("etcd://"):
        match = _ETCD.match(root)
        if not match or not 0 < int(match["port"]) < 65536:
            raise UserError(
                f"bad cell root {root!r}: expected etcd://HOST:PORT[/prefix][?ca=PEM&cert=PEM&key=PEM"
                "&user=NAME&password_file=PATH]"
            )
        options = (
            tuple(parse_qsl(match["query"] or "", keep_blank_values=True, strict_parsing=bool(match["query"])))
            if match["query"]
            else ()
        )
        unknown = sorted({k for k, _ in options} - set(_ETCD_OPTIONS))
        if unknown:
            raise UserError(
                f"bad cell root {root!r}: unknown option(s) {', '.join(unknown)}; known: {', '.join(_ETCD_OPTIONS)}"
            )
        return RootSpec("etcd", f"{match['host']}:{match['port']}", match["prefix"] or "", options)
    if root.startswith("memory://"):
        name = root[len("memory://") :]
        if not name:
            raise UserError(f"bad cell root {root!r}: expected memory://NAME")
        return RootSpec("memory", name)
    if "://" in root and not root.startswith("file://"):
        raise UserError(f"unsupported cell root {root!r}: use file://DIR, a directory, or etcd://HOST:PORT[/prefix]")
    path = root[len("file://") :] if root.startswith("file://") else root
    if not path:
        raise UserError(f"bad cell root {root!r}: expected file://DIR")
    return RootSpec("file", os.path.abspath(os.path.expanduser(path)))


def resolve_root(root: str | None) -> str:
    """The --root value, else $TENOR_ROOT; a one-line error when neither is set."""
    value = root or os.environ.get(ROOT_ENV, "")
    if not value:
        raise UserError(f"no cell root: pass --root (file://DIR or etcd://HOST:PORT) or set {ROOT_ENV}")
    parse_root(value)
    return value


def open_store(root: str, cell: CellName, *, etcd_ttl_s: int | None = None) -> CellStore:
    spec = parse_root(root)
    if spec.kind == "etcd":
        from tenor.admin.store.etcd import DEFAULT_TTL_S, EtcdCellStore

        # Each store's save_state takes the Leadership type only it hands out (narrower than the Protocol's).
        return EtcdCellStore(  # type: ignore[return-value]
            spec.location, spec.prefix, cell, etcd_ttl_s or DEFAULT_TTL_S, spec.etcd_access()
        )
    if spec.kind == "memory":
        from tenor.admin.store.memory import MemoryCellStore

        return MemoryCellStore(spec.location, cell)  # type: ignore[return-value]  # as above
    from tenor.admin.store.file import FileCellStore

    if not os.path.isdir(spec.location):
        raise UserError(f"cell root {spec.location} is not a directory (create it first)")
    return FileCellStore(spec.location, cell)  # type: ignore[return-value]  # as above


def list_cells(root: str) -> list[CellName]:
    """The cells that exist in a root (an admin has served them at least once)."""
    spec = parse_root(root)
    if spec.kind == "etcd":
        from tenor.admin.store.etcd_client import EtcdClient

        client = EtcdClient(spec.location, access=spec.etcd_access())
        try:
            base = f"{spec.prefix}/tenor/".encode()
            keys = client.keys_with_prefix(base)
        finally:
            client.close()
        names = {k[len(base) :].decode().split("/")[0] for k in keys if k.endswith(b"/config")}
    elif spec.kind == "memory":
        from tenor.admin.store.memory import cell_names

        names = set(cell_names(spec.location))
    else:
        base_dir = os.path.join(spec.location, "tenor")
        if not os.path.isdir(spec.location):
            raise UserError(f"cell root {spec.location} is not a directory")
        names = {
            d
            for d in (os.listdir(base_dir) if os.path.isdir(base_dir) else ())
            if os.path.isfile(os.path.join(base_dir, d, "config.json"))
        }
    return [CellName(n) for n in sorted(names)]

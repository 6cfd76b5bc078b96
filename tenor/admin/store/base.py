"""What a cell root stores, and the contract every root backend (file, etcd, memory) keeps.

A root holds, per cell: its config, the active admin's location, and the durable state
(published model specs). The assignment of replicas to servers is not stored: model
servers re-join a new admin and report what they have loaded.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Protocol

from tenor.admin.naming import CellName, parse_model_name

STATE_VERSION = 1


class StoreError(Exception):
    """The root cannot be read or written (missing directory, etcd down, corrupt file)."""


class LostLeadership(StoreError):
    """This admin is no longer the leader; it must stop acting as one."""


@dataclass(frozen=True)
class ModelSpec:
    """A published model as the admin keeps it durably."""

    name: str  # /tenor/<cell>/<model>
    config_name: str
    checkpoint: str | None
    replicas: int
    overrides: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs
    uuid: str = ""

    def __post_init__(self) -> None:
        parse_model_name(self.name)
        if not isinstance(self.replicas, int) or self.replicas < 0:
            raise ValueError(f"replicas must be an integer >= 0, got {self.replicas!r}")
        if list(self.overrides) != sorted(self.overrides):
            raise ValueError("overrides must be sorted (key, value) pairs; use ModelSpec.make")

    @classmethod
    def make(
        cls,
        name: str,
        config_name: str,
        checkpoint: str | None,
        replicas: int,
        overrides: dict[str, str] | None = None,
        uuid: str = "",
    ) -> "ModelSpec":
        return cls(name, config_name, checkpoint, replicas, tuple(sorted((overrides or {}).items())), uuid)

    @property
    def overrides_map(self) -> dict[str, str]:
        return dict(self.overrides)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "config_name": self.config_name,
            "checkpoint": self.checkpoint,
            "replicas": self.replicas,
            "overrides": self.overrides_map,
            "uuid": self.uuid,
        }

    @classmethod
    def from_json(cls, obj: object) -> "ModelSpec":
        if not isinstance(obj, dict):
            raise ValueError(f"a model spec must be an object, got {type(obj).__name__}")
        overrides = obj.get("overrides") or {}
        if not isinstance(overrides, dict) or not all(isinstance(v, str) for v in overrides.values()):
            raise ValueError("a model spec's overrides must map strings to strings")
        return cls.make(
            str(obj["name"]),
            str(obj["config_name"]),
            None if obj.get("checkpoint") is None else str(obj["checkpoint"]),
            int(obj["replicas"]),
            overrides,
            str(obj.get("uuid", "")),
        )


@dataclass(frozen=True)
class CellState:
    """The durable part of a cell: its published models, sorted by name."""

    models: tuple[ModelSpec, ...] = ()

    def get(self, name: str) -> ModelSpec | None:
        return next((m for m in self.models if m.name == name), None)

    def with_model(self, spec: ModelSpec) -> "CellState":
        others = [m for m in self.models if m.name != spec.name]
        return CellState(tuple(sorted([*others, spec], key=lambda m: m.name)))

    def without_model(self, name: str) -> "CellState":
        return CellState(tuple(m for m in self.models if m.name != name))

    def to_bytes(self) -> bytes:
        doc = {"version": STATE_VERSION, "models": [m.to_json() for m in self.models]}
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "CellState":
        try:
            doc = json.loads(data)
            if doc.get("version") != STATE_VERSION:
                raise ValueError(f"unsupported state version {doc.get('version')!r}")
            models = [ModelSpec.from_json(m) for m in doc["models"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"corrupt cell state in {where}: {exc}") from None
        return cls(tuple(sorted(models, key=lambda m: m.name)))


@dataclass(frozen=True)
class AdminLocation:
    """Where the active admin listens; written by the leader, read by everyone else."""

    address: str  # gRPC host:port
    admin_id: str  # "<address>_<random hex>", new for each admin process
    http_address: str = ""  # status page host:port
    since: float = field(default_factory=time.time)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "address": self.address,
                "admin_id": self.admin_id,
                "http_address": self.http_address,
                "since": self.since,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "AdminLocation | None":
        """None for a placeholder or a half-written file: callers just look again later."""
        try:
            doc = json.loads(data)
            return cls(
                str(doc["address"]),
                str(doc["admin_id"]),
                str(doc.get("http_address", "")),
                float(doc.get("since", 0.0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


class Leadership(Protocol):
    """Held by the active admin. `keepalive` is called every `keepalive_s` and raises
    LostLeadership once another admin may have taken over."""

    keepalive_s: float

    def keepalive(self) -> None: ...

    def release(self) -> None: ...


class CellStore(Protocol):
    """One cell in one root. Every method may raise StoreError."""

    root: str
    cell: CellName

    def ensure_cell(self) -> None:
        """Creates the cell's config if missing (idempotent)."""

    def try_lead(self, location: AdminLocation) -> Leadership | None:
        """Becomes the leader and publishes `location`, or returns None if another admin leads."""

    def read_location(self) -> AdminLocation | None: ...

    def load_state(self) -> CellState: ...

    def save_state(self, state: CellState, leadership: Leadership) -> None:
        """Durable before it returns; refused (LostLeadership) unless `leadership` is current."""

    def read_token(self) -> str | None:
        """The cell token text (tenor.auth.tokens), None before any server created it."""

    def create_token(self, text: str) -> bool:
        """Stores `text` as the token only if there is none yet; True if this call stored it."""

    def write_token(self, text: str) -> None:
        """Replaces the token text (a rotation step)."""

    def close(self) -> None: ...

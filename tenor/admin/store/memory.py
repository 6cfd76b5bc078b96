"""A cell root in this process's memory: `memory://NAME`, for unit tests and in-process cells.

Stores opened with the same NAME share one root, so several admins in one process can
compete for leadership as they would on a real root. Nothing survives the process.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tenor.admin.naming import CellName
from tenor.admin.store.base import AdminLocation, CellState, LostLeadership


@dataclass
class _Cell:
    state: CellState = field(default_factory=CellState)
    location: AdminLocation | None = None
    leader: "MemoryLeadership | None" = None
    configured: bool = False
    token: str | None = None


_ROOTS: dict[str, dict[str, _Cell]] = {}
_LOCK = threading.Lock()


def reset_memory_roots() -> None:
    with _LOCK:
        _ROOTS.clear()


def cell_names(name: str) -> list[str]:
    with _LOCK:
        return sorted(c for c, cell in _ROOTS.get(name, {}).items() if cell.configured)


class MemoryLeadership:
    keepalive_s = 0.1

    def __init__(self, cell: _Cell) -> None:
        self._cell = cell

    def keepalive(self) -> None:
        with _LOCK:
            if self._cell.leader is not self:
                raise LostLeadership("another admin holds the memory root")

    def release(self) -> None:
        with _LOCK:
            if self._cell.leader is self:
                self._cell.leader = None

    def revoke(self) -> None:
        """For tests: as if the lease expired (the leader notices on its next keepalive)."""
        self.release()


class MemoryCellStore:
    def __init__(self, name: str, cell: CellName) -> None:
        self.root = f"memory://{name}"
        self.cell = cell
        with _LOCK:
            self._cell = _ROOTS.setdefault(name, {}).setdefault(cell.cell, _Cell())

    def ensure_cell(self) -> None:
        with _LOCK:
            self._cell.configured = True

    def try_lead(self, location: AdminLocation) -> MemoryLeadership | None:
        with _LOCK:
            if self._cell.leader is not None:
                return None
            self._cell.leader = MemoryLeadership(self._cell)
            self._cell.location = location
            return self._cell.leader

    def read_location(self) -> AdminLocation | None:
        with _LOCK:
            return self._cell.location

    def load_state(self) -> CellState:
        with _LOCK:
            return self._cell.state

    def save_state(self, state: CellState, leadership: MemoryLeadership) -> None:
        with _LOCK:
            if self._cell.leader is not leadership:
                raise LostLeadership("not the leader of the memory root")
            self._cell.state = state

    def read_token(self) -> str | None:
        with _LOCK:
            return self._cell.token

    def create_token(self, text: str) -> bool:
        with _LOCK:
            if self._cell.token is not None:
                return False
            self._cell.token = text
            return True

    def write_token(self, text: str) -> None:
        with _LOCK:
            self._cell.token = text

    def close(self) -> None:
        return None

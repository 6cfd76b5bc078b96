"""A cell root in a local directory: `file://DIR`.

Layout: `DIR/tenor/<cell>/{config.json, state.json, location.json, admin.lock, token}`
(`token` is 0600: only the cell's own user may read it).
Election is an exclusive `flock` on admin.lock held for the admin's lifetime: the kernel
drops it when the process dies, even on kill -9, so a standby's next try succeeds.
Writes go to a temp file that is fsynced and renamed over the target, then the directory
is fsynced, so a crash leaves either the old or the new file, never half of one.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path

from tenor.admin.naming import CellName
from tenor.admin.store.base import AdminLocation, CellState, LostLeadership, StoreError


def write_durably(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class FileLeadership:
    """The held lock. Nothing to renew: the lock lasts as long as the descriptor."""

    keepalive_s = 1.0

    def __init__(self, fd: int, lock_path: Path) -> None:
        self._fd: int | None = fd
        self._lock_path = lock_path

    def keepalive(self) -> None:
        if self._fd is None:
            raise LostLeadership("leadership was released")
        # If someone deleted the cell directory, a new admin could lock a new file; notice that.
        try:
            same = os.fstat(self._fd).st_ino == os.stat(self._lock_path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            raise LostLeadership(f"{self._lock_path} was removed or replaced")

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


class FileCellStore:
    def __init__(self, directory: str | Path, cell: CellName) -> None:
        self.directory = Path(directory)
        self.root = f"file://{self.directory}"
        self.cell = cell
        self.cell_dir = self.directory / "tenor" / cell.cell

    @property
    def state_path(self) -> Path:
        return self.cell_dir / "state.json"

    @property
    def location_path(self) -> Path:
        return self.cell_dir / "location.json"

    def ensure_cell(self) -> None:
        if not self.directory.is_dir():
            raise StoreError(f"cell root {self.directory} is not a directory")
        self.cell_dir.mkdir(parents=True, exist_ok=True)
        config = self.cell_dir / "config.json"
        if not config.exists():
            write_durably(config, json.dumps({"cell": str(self.cell)}, indent=1).encode() + b"\n")

    def try_lead(self, location: AdminLocation) -> FileLeadership | None:
        self.ensure_cell()
        lock_path = self.cell_dir / "admin.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        leadership = FileLeadership(fd, lock_path)
        try:
            write_durably(self.location_path, location.to_bytes())
        except BaseException:
            leadership.release()
            raise
        return leadership

    def read_location(self) -> AdminLocation | None:
        try:
            return AdminLocation.from_bytes(self.location_path.read_bytes())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read {self.location_path}: {exc}") from None

    def load_state(self) -> CellState:
        try:
            data = self.state_path.read_bytes()
        except FileNotFoundError:
            return CellState()
        except OSError as exc:
            raise StoreError(f"cannot read {self.state_path}: {exc}") from None
        return CellState.from_bytes(data, str(self.state_path))

    def save_state(self, state: CellState, leadership: FileLeadership) -> None:
        leadership.keepalive()
        try:
            write_durably(self.state_path, state.to_bytes())
        except OSError as exc:
            raise StoreError(f"cannot write {self.state_path}: {exc}") from None

    @property
    def token_path(self) -> Path:
        return self.cell_dir / "token"

    def read_token(self) -> str | None:
        try:
            return self.token_path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read the cell token {self.token_path}: {exc.strerror}") from None

    def create_token(self, text: str) -> bool:
        self.ensure_cell()
        try:
            fd = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            return False
        except OSError as exc:
            raise StoreError(f"cannot create the cell token {self.token_path}: {exc.strerror}") from None
        # Readers that find it empty treat it as "no token yet" and look again a second later.
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        return True

    def write_token(self, text: str) -> None:
        try:
            write_durably(self.token_path, text.encode())  # mkstemp's file is 0600, and so stays
        except OSError as exc:
            raise StoreError(f"cannot write the cell token {self.token_path}: {exc.strerror}") from None

    def close(self) -> None:
        return None

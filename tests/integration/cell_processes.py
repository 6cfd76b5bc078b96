"""Real cell processes for the integration scenarios: model servers, a whole cell, and
client traffic that counts failures. Every process is killed on exit."""

from __future__ import annotations

import atexit
import contextlib
import functools
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import grpc

from tenor.auth.channels import CellCredentials
from tenor.auth.tls import TlsFiles
from tenor.client import ClientOptions, Model
from tenor.client.admin_client import AdminClient
from tenor.proto import common_pb2, modelet_pb2, modelet_pb2_grpc
from tests.fakes.cell import REPO_ROOT, AdminProcess, ServedProcess, child_env, wait_until
from tests.fakes.tls import make_tls, tls_flags
from tests.fakes.token import bearer

CONFIG = "test.TinyLlamaRandom"
LOADED = common_pb2.ModelStatus.LOADED
SHORT_GENERATE = {"per_example_max_decode_steps": 4}


@functools.cache
def cell_tls() -> TlsFiles:
    """Every integration cell runs with mTLS on (and the cell token, which is always on)."""
    directory = Path(tempfile.mkdtemp(prefix="tenor-tls-"))
    atexit.register(shutil.rmtree, directory, True)
    return make_tls(directory)


def cell_credentials() -> CellCredentials:
    return CellCredentials(tls=cell_tls())


class ModelServerProcess(ServedProcess):
    """One `tenor model-server serve` process; add flags to `args` before entering it."""

    kind = "model-server"
    banner = re.compile(r"^model server for \S+ serving on (\S+?)(?:, http (\S+))?$", re.MULTILINE)

    def __init__(self, root: str, cell: str) -> None:
        self.root, self.cell = root, cell
        args = [
            sys.executable,
            "-m",
            "tenor.cli.main",
            "model-server",
            "serve",
            "--cell",
            cell,
            "--root",
            root,
            "--port",
            "0",
            "--rejoin-interval",
            "0.3",
            "--drain-timeout",
            "2",
            *tls_flags(cell_tls()),
        ]
        super().__init__(args)

    def states(self) -> dict[str, modelet_pb2.ModelState]:
        """What the server itself says it holds, straight from its Modelet service."""
        with grpc.secure_channel(self.address, cell_tls().channel_credentials()) as channel:
            reply = modelet_pb2_grpc.ModeletStub(channel).GetStatus(
                modelet_pb2.GetStatusRequest(), timeout=2, metadata=bearer(self.root, self.cell)
            )
        return {m.model_name: m for m in reply.models}


@dataclass
class Cell:
    root: str
    cell: str
    admins: list[AdminProcess]
    servers: list[ModelServerProcess]
    admin: AdminClient

    def leader(self) -> AdminProcess:
        return wait_until(
            lambda: next((a for a in self.admins if a.proc.poll() is None and a.is_leader()), None),
            15,
            "an active admin",
        )

    def addresses(self, model: str) -> tuple[str, ...]:
        return tuple(self.admin.list(model)[0].addresses)

    def wait_replicas(self, model: str, n: int, without: str = "", timeout_s: float = 40) -> tuple[str, ...]:
        """Waits until exactly n replicas serve, none of them at `without`."""

        def exactly_n() -> tuple[str, ...] | None:
            addresses = self.addresses(model)
            return addresses if len(addresses) == n and without not in addresses else None

        return wait_until(exactly_n, timeout_s, f"{n} serving replica(s) of {model} (not at {without or '-'})")

    def server_at(self, address: str) -> ModelServerProcess:
        return next(s for s in self.servers if s.address == address)


@contextlib.contextmanager
def running_cell(root: str, cell: str, num_admins: int, num_servers: int, **admin_options: object) -> Iterator[Cell]:
    """Admins first (the first one leads), then model servers that join it."""
    with contextlib.ExitStack() as stack:
        admin_options = {"extra_args": tuple(tls_flags(cell_tls())), **admin_options}
        admins = [stack.enter_context(AdminProcess(root, cell, **admin_options))]
        admins[0].wait_leader()
        admins += [stack.enter_context(AdminProcess(root, cell, **admin_options)) for _ in range(num_admins - 1)]
        servers = [stack.enter_context(ModelServerProcess(root, cell)) for _ in range(num_servers)]
        admin = AdminClient(root, cell, timeout_s=30, credentials=cell_credentials())
        stack.callback(admin.close)
        yield Cell(root, cell, admins, servers, admin)


def run_cli(root: str, *argv: str, timeout_s: float = 60, tls: bool = True) -> subprocess.CompletedProcess[str]:
    if tls:
        argv = (*argv, *tls_flags(cell_tls()))  # the verbs take their flags after the positionals too
    return subprocess.run(
        [sys.executable, "-m", "tenor.cli.main", *argv],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**child_env(), "TENOR_ROOT": root},
        timeout=timeout_s,
    )


@dataclass
class Traffic:
    """Generate calls in a loop from a background thread, through the Python client."""

    model: Model
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> "Traffic":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(60)

    def _run(self) -> None:
        lm = self.model.lm()
        while not self._stop.is_set():
            try:
                samples = lm.generate("hello", SHORT_GENERATE, timeout_s=30)
                assert len(samples) == 1 and samples[0].score < 0
                self.ok += 1
            except Exception as exc:  # recorded, and the test fails on it
                self.failures.append(f"{type(exc).__name__}: {exc}")

    def wait_ok(self, more: int, timeout_s: float = 30) -> None:
        target = self.ok + more
        wait_until(lambda: self.ok >= target or self.failures, timeout_s, f"{more} more answered requests")


def client_for(root: str, model: str) -> Model:
    return Model(model, ClientOptions(root=root, timeout_s=30, credentials=cell_credentials()))


def wait_until_leader_changes(cell: Cell, old: AdminProcess, timeout_s: float = 15) -> AdminProcess:
    start = time.monotonic()
    leader = wait_until(
        lambda: next((a for a in cell.admins if a is not old and a.is_leader()), None),
        timeout_s,
        "a standby to take over",
    )
    assert time.monotonic() - start < timeout_s
    return leader

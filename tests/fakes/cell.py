"""Real server processes for tests: `python -m tenor.cli.main admin serve` (and the base that
model-server processes share), on loopback ports they bind themselves, always killed on exit."""

from __future__ import annotations

import itertools
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

from tenor.admin.naming import parse_cell_name
from tenor.admin.store import open_store

REPO_ROOT = Path(__file__).resolve().parents[2]


# Ports that tests choose before starting what listens on them (free_port), below Linux's default
# range of ephemeral ports (32768-60999).
# A port the kernel hands out for binding port 0 comes from that range, as does the local port of
# every outgoing connection, so between a test choosing such a port and its server binding it, a
# client's connection could take it (the server then exits with "in use"). Handed out in turn from
# a random start, so that a test process gets no port twice before it has had all 12768 (a
# fixture often asks for several before starting anything).
_PORTS = range(20000, 32768)
_next_port = itertools.count(random.randrange(len(_PORTS)))


def free_port() -> int:
    """A loopback port nothing listens on now, outside the ephemeral range, new to this process.

    For what must be told its port before it starts (etcd, a torch.distributed group's leader)
    and for addresses nothing should answer at; tenor's own servers bind port 0 instead."""
    for _ in range(len(_PORTS)):
        port = _PORTS[next(_next_port) % len(_PORTS)]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_PORTS.start}-{_PORTS.stop - 1}")


def child_env() -> dict[str, str]:
    """This process's environment, with the repository importable (children run `python -m tenor...`)."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.05):
    """Polls `predicate` until it returns something truthy; fails the test with `what` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


class ServedProcess:
    """A `tenor ... serve` process that binds port 0 and is known by the addresses it prints.

    Choosing a port first and passing it in leaves a window in which another process can take
    it; a server that binds port 0 cannot lose its port that way. Its `address` is the one its
    banner line names, so reading it waits until the process serves. Use as a context manager
    (killed on exit)."""

    kind = "server"
    # group 1: the gRPC address; group 2: the HTTP address, where the process has one.
    banner: re.Pattern[str]

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self._log = tempfile.NamedTemporaryFile(prefix=f"tenor-{self.kind}-", suffix=".log", delete=False)
        self.proc: subprocess.Popen[bytes] | None = None
        self._banner: re.Match[str] | None = None

    def start(self) -> Self:
        self.proc = subprocess.Popen(
            self.args, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=child_env()
        )
        return self

    def output(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def _banner_line(self) -> re.Match[str] | None:
        # Kept once read: the addresses stay the process's after it dies (tests kill it and then
        # ask where it was).
        if self._banner is None:
            self._banner = self.banner.search(self.output())
        return self._banner

    def printed_address(self) -> str | None:
        """The gRPC address, once the banner is out; None before (never waits)."""
        found = self._banner_line()
        return found.group(1) if found else None

    def _wait(self, predicate, timeout_s: float, what: str):
        """wait_until, failing at once if the process dies, and with its log either way."""
        try:
            return wait_until(lambda: predicate() or self._check_alive(), timeout_s, what)
        except AssertionError as exc:  # what the process said is what tells why
            raise AssertionError(f"{exc}; its log:\n{self.output()}") from None

    def _wait_banner(self, timeout_s: float = 60.0) -> re.Match[str]:
        return self._wait(self._banner_line, timeout_s, f"the {self.kind} to serve")

    @property
    def address(self) -> str:
        return self._wait_banner().group(1)

    @property
    def http_address(self) -> str:
        http = self._wait_banner().group(2)
        if http is None:
            raise AssertionError(f"the {self.kind} serves no HTTP; its banner:\n{self.output()}")
        return http

    @property
    def http_port(self) -> int:
        return int(self.http_address.rsplit(":", 1)[1])

    def _check_alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.kind} exited with {self.proc.returncode}:\n{self.output()}")
        return False

    def kill(self) -> None:
        """SIGKILL: no cleanup, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def terminate(self, timeout_s: float = 10.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self._log.close()
        os.unlink(self._log.name)


class AdminProcess(ServedProcess):
    """One `tenor admin serve` process, with short intervals."""

    kind = "admin"
    banner = re.compile(r"^tenor admin: serving \S+ on (\S+?)(?:, status page http://(\S+?)/)? \(root", re.MULTILINE)

    def __init__(
        self,
        root: str,
        cell: str,
        *,
        poll_interval: float = 0.2,
        prune_after: float = 1.0,
        startup_grace: float = 0.3,
        election_retry: float = 0.1,
        etcd_ttl: int | None = None,
        max_load_attempts: int = 3,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.root = root
        self.cell = cell
        args = [
            sys.executable,
            "-m",
            "tenor.cli.main",
            "admin",
            "serve",
            "--cell",
            cell,
            "--root",
            root,
            "--port",
            "0",
            "--http-port",
            "0",
            "--poll-interval",
            str(poll_interval),
            "--prune-after",
            str(prune_after),
            "--startup-grace",
            str(startup_grace),
            "--election-retry",
            str(election_retry),
            "--max-load-attempts",
            str(max_load_attempts),
            "--log-level",
            "INFO",
            *extra_args,
        ]
        if etcd_ttl is not None:
            args += ["--etcd-ttl", str(etcd_ttl)]
        super().__init__(args)

    def is_leader(self) -> bool:
        address = self.printed_address()
        if address is None:
            return False
        store = open_store(self.root, parse_cell_name(self.cell))
        try:
            location = store.read_location()
        finally:
            store.close()
        return location is not None and location.address == address and "leading" in self.output()

    def wait_leader(self, timeout_s: float = 15.0) -> "AdminProcess":
        # alive first: a killed leader's location record outlives it
        self._wait(lambda: self._check_alive() or self.is_leader(), timeout_s, "the admin to lead")
        return self

    def wait_serving(self, timeout_s: float = 15.0) -> "AdminProcess":
        self._wait_banner(timeout_s)
        return self

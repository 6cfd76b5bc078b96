"""Real admin server processes for tests: `python -m tenor.cli.main admin serve` on free
loopback ports, with short intervals, always killed on exit."""

from __future__ import annotations

import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tenor.admin.naming import parse_cell_name
from tenor.admin.store import open_store

REPO_ROOT = Path(__file__).resolve().parents[2]


# Ports for the servers tests start, below Linux's default range of ephemeral ports (32768-60999).
# A port the kernel hands out for binding port 0 comes from that range, as does the local port of
# every outgoing connection, so between a test choosing such a port and its server binding it, a
# client's connection could take it (the server then exits with "in use"). Handed out in turn from
# a random start, so that a test process gets no port twice before it has had all 12768 (a
# fixture often asks for several before starting anything).
_PORTS = range(20000, 32768)
_next_port = itertools.count(random.randrange(len(_PORTS)))


def free_port() -> int:
    """A loopback port nothing listens on now, outside the ephemeral range, new to this process."""
    for _ in range(len(_PORTS)):
        port = _PORTS[next(_next_port) % len(_PORTS)]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_PORTS.start}-{_PORTS.stop - 1}")


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


class AdminProcess:
    """One `tenor admin serve` process. Use as a context manager (killed on exit)."""

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
        self.port = free_port()
        self.http_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.args = [
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
            str(self.port),
            "--http-port",
            str(self.http_port),
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
            self.args += ["--etcd-ttl", str(etcd_ttl)]
        self._log = tempfile.NamedTemporaryFile(prefix="tenor-admin-", suffix=".log", delete=False)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "AdminProcess":
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)
        return self

    def output(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def is_leader(self) -> bool:
        store = open_store(self.root, parse_cell_name(self.cell))
        try:
            location = store.read_location()
        finally:
            store.close()
        return location is not None and location.address == self.address and "leading" in self.output()

    def wait_leader(self, timeout_s: float = 15.0) -> "AdminProcess":
        self._check_alive()
        try:
            wait_until(lambda: self._check_alive() or self.is_leader(), timeout_s, f"admin {self.address} to lead")
        except AssertionError as exc:  # what the admin said is what tells why
            raise AssertionError(f"{exc}; its log:\n{self.output()}") from None
        return self

    def wait_serving(self, timeout_s: float = 15.0) -> "AdminProcess":
        wait_until(
            lambda: self._check_alive() or "serving" in self.output(), timeout_s, f"admin {self.address} to serve"
        )
        return self

    def _check_alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"admin exited with {self.proc.returncode}:\n{self.output()}")
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

    def __enter__(self) -> "AdminProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self._log.close()
        os.unlink(self._log.name)

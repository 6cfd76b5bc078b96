"""A real etcd (Debian's etcd-server, binary `etcd`) on loopback for tests.

Fixtures: `etcd_server` (one per test session, skipped if etcd is not installed) and
`etcd_root` (an `etcd://127.0.0.1:PORT/<unique prefix>` root per test). Import them into a
test module or conftest: `from tests.fakes.etcd import etcd_server, etcd_root  # noqa: F401`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.fakes.cell import free_port


class EtcdServer:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.endpoint = f"127.0.0.1:{self.client_port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="tenor-etcd-", suffix=".log", delete=False)

    def start(self, timeout_s: float = 20.0) -> "EtcdServer":
        client = f"http://{self.endpoint}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.proc = subprocess.Popen(
            [
                "etcd",
                "--name",
                "tenor-test",
                "--data-dir",
                str(self.data_dir / "etcd"),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"tenor-test={peer}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}: {self.output()[-2000:]}")
            try:
                if httpx.post(f"{client}/v3/kv/range", json={"key": "eA=="}, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"etcd did not start in {timeout_s}s: {self.output()[-2000:]}")
            time.sleep(0.1)

    def output(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def root(self, prefix: str = "") -> str:
        return f"etcd://{self.endpoint}" + (f"/{prefix}" if prefix else "")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    def __enter__(self) -> "EtcdServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory):
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (Debian package etcd-server)")
    with EtcdServer(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@pytest.fixture
def etcd_root(etcd_server: EtcdServer) -> str:
    return etcd_server.root(f"t{uuid.uuid4().hex[:10]}")

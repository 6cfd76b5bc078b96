"""An etcd root behind etcd's own TLS (client certificates required) and auth (a user and
password): tenor reaches it only with the CA, its certificate and the password file named
in the root URL; an admin serves a cell on it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tenor.admin.naming import parse_cell_name
from tenor.admin.store import StoreError, open_store
from tenor.client.admin_client import AdminClient
from tenor.errors import UserError
from tests.fakes.cell import AdminProcess, free_port
from tests.fakes.tls import make_tls

CELL = "/tenor/sec"
PASSWORD = "etcd-root-password-for-tests"


@pytest.fixture(scope="module")
def secure_etcd(tmp_path_factory):
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (Debian package etcd-server)")
    base = tmp_path_factory.mktemp("secure-etcd")
    tls = make_tls(base / "tls", common_name=False)
    port, peer_port = free_port(), free_port()
    url, peer = f"https://127.0.0.1:{port}", f"http://127.0.0.1:{peer_port}"
    log = tempfile.NamedTemporaryFile(prefix="tenor-etcd-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [
            "etcd",
            "--name",
            "sec",
            "--data-dir",
            str(base / "data"),
            "--listen-client-urls",
            url,
            "--advertise-client-urls",
            url,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"sec={peer}",
            "--cert-file",
            str(tls.cert),
            "--key-file",
            str(tls.key),
            "--trusted-ca-file",
            str(tls.ca),
            "--client-cert-auth",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    http = httpx.Client(base_url=url, verify=_context(tls), timeout=2)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if http.post("/v3/kv/range", json={"key": "eA=="}).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, Path(log.name).read_text()[-2000:]
            time.sleep(0.1)
        http.post("/v3/auth/role/add", json={"name": "root"})
        assert http.post("/v3/auth/user/add", json={"name": "root", "password": PASSWORD}).status_code == 200
        assert http.post("/v3/auth/user/grant", json={"user": "root", "role": "root"}).status_code == 200
        assert http.post("/v3/auth/enable", json={}).status_code == 200
        password_file = base / "password"
        password_file.write_text(PASSWORD + "\n")
        yield f"127.0.0.1:{port}", tls, password_file
    finally:
        http.close()
        proc.kill()
        proc.wait(timeout=10)
        log.close()
        Path(log.name).unlink(missing_ok=True)


def _context(tls):
    from tenor.admin.store.etcd_client import EtcdAccess

    return EtcdAccess(ca=tls.ca, cert=tls.cert, key=tls.key).ssl_context()


def _root(endpoint: str, tls, password_file: Path, **drop: bool) -> str:
    options = {"ca": tls.ca, "cert": tls.cert, "key": tls.key, "user": "root", "password_file": str(password_file)}
    query = "&".join(f"{k}={v}" for k, v in options.items() if not drop.get(k))
    return f"etcd://{endpoint}/tenor?{query}"


def test_the_root_opens_with_tls_and_the_password_only(secure_etcd, tmp_path) -> None:
    endpoint, tls, password_file = secure_etcd
    store = open_store(_root(endpoint, tls, password_file), parse_cell_name(CELL))
    try:
        store.ensure_cell()
        store.create_token("t" * 32 + "\n")
        assert store.read_token() == "t" * 32 + "\n"
    finally:
        store.close()
    wrong = tmp_path / "wrong"
    wrong.write_text("not the password")
    for root in (
        f"etcd://{endpoint}/tenor",  # plain HTTP to a TLS port
        _root(endpoint, tls, password_file, cert=True, key=True),  # no client certificate
        _root(endpoint, tls, wrong),
    ):  # wrong password
        refused = open_store(root, parse_cell_name(CELL))
        try:
            with pytest.raises(StoreError):
                refused.read_token()
        finally:
            refused.close()


def test_bad_etcd_options_are_one_line_errors(tmp_path) -> None:
    for root, message in (
        ("etcd://127.0.0.1:1/x?user=root", "user and password_file go together"),
        (f"etcd://127.0.0.1:1/x?ca={tmp_path}/none.pem", "no such file"),
        ("etcd://127.0.0.1:1/x?token=abc", "unknown option(s) token"),
    ):
        with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
            open_store(root, parse_cell_name(CELL))


def test_an_admin_leads_a_cell_on_the_secured_etcd(secure_etcd) -> None:
    endpoint, tls, password_file = secure_etcd
    root = _root(endpoint, tls, password_file)
    with AdminProcess(root, CELL, etcd_ttl=2) as admin:
        admin.wait_leader()
        client = AdminClient(root, CELL, timeout_s=20)
        try:
            client.publish(f"{CELL}/tiny", "test.TinyLlamaRandom", None, 0)
            assert [m.model.model_name for m in client.list()] == [f"{CELL}/tiny"]
        finally:
            client.close()

"""The cell credential on real servers: an admin process on a file:// root and an
in-process model server. Without the token every RPC is UNAUTHENTICATED; with TLS on, a
client that cannot verify the server (or, under mTLS, prove itself) does not get in."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import subprocess
import sys

import grpc
import pytest

from tenor.auth.channels import CellAccess, CellCredentials
from tenor.auth.tls import TlsFiles
from tenor.auth.tokens import TokenSet, TokenSource
from tenor.engine.mock_engine import MockEngine
from tenor.proto import admin_pb2, admin_pb2_grpc, common_pb2, lm_pb2, lm_pb2_grpc, modelet_pb2, modelet_pb2_grpc
from tenor.server.model_server import ModelServer, ModelServerConfig
from tenor.server.modelet_service import ModelTable
from tests.fakes.cell import REPO_ROOT, AdminProcess, child_env
from tests.fakes.tls import make_tls
from tests.fakes.token import bearer, cell_token

CELL = "/tenor/test"
MODEL = "/tenor/test/lm"
WRONG = [("authorization", "Bearer " + "x" * 43)]

ADMIN_MUTATIONS = {
    "Publish": admin_pb2.PublishRequest(
        model=admin_pb2.Model(model_name=MODEL, config_name="test.TinyLlamaRandom", requested_replicas=1)
    ),
    "Update": admin_pb2.UpdateRequest(model_name=MODEL, replicas=2),
    "Unpublish": admin_pb2.UnpublishRequest(model_name=MODEL),
    "Join": admin_pb2.JoinRequest(address="127.0.0.1:1", spec=common_pb2.ServerSpec(platform="cpu")),
}
ADMIN_READS = {
    "List": admin_pb2.ListRequest(),
    "Stats": admin_pb2.StatsRequest(),
    "WaitForReady": admin_pb2.WaitForReadyRequest(model_name=MODEL, num_replicas=0),
}


def _code(call) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _admin_codes(address: str, methods: dict, metadata) -> dict[str, grpc.StatusCode]:
    with grpc.insecure_channel(address) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        codes = {m: _code(lambda: getattr(stub, m)(r, timeout=5, metadata=metadata)) for m, r in methods.items()}
        codes["WatchLoc"] = _code(
            lambda: next(stub.WatchLoc(admin_pb2.WatchLocRequest(model_name=MODEL), timeout=2, metadata=metadata))
        )
    return codes


@pytest.fixture
def root(tmp_path) -> str:
    return f"file://{tmp_path / 'root'}"


@pytest.fixture
def admin(root):
    os.makedirs(root[len("file://") :])
    with AdminProcess(root, CELL) as process:
        yield process.wait_leader()


def test_without_the_token_every_admin_rpc_is_unauthenticated(root, admin) -> None:
    everything = {**ADMIN_MUTATIONS, **ADMIN_READS}
    for metadata in (None, WRONG, [("authorization", cell_token(root))]):  # last: no "Bearer"
        assert set(_admin_codes(admin.address, everything, metadata).values()) == {grpc.StatusCode.UNAUTHENTICATED}
    with_token = _admin_codes(admin.address, {"Publish": ADMIN_MUTATIONS["Publish"], **ADMIN_READS}, bearer(root))
    assert grpc.StatusCode.UNAUTHENTICATED not in with_token.values() and with_token["Publish"] == grpc.StatusCode.OK


def test_the_root_token_is_private_to_its_owner(root, admin) -> None:
    path = os.path.join(root[len("file://") :], "tenor", "test", "token")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert TokenSet.parse(open(path).read(), path).sending


def test_read_only_verbs_open_only_with_the_flag(tmp_path) -> None:
    root = f"file://{tmp_path}"
    with AdminProcess(root, CELL, extra_args=("--open-read-only",)) as process:
        process.wait_leader()
        reads = _admin_codes(process.address, ADMIN_READS, None)
        mutations = _admin_codes(process.address, ADMIN_MUTATIONS, None)
    assert grpc.StatusCode.UNAUTHENTICATED not in reads.values()
    assert all(code == grpc.StatusCode.UNAUTHENTICATED for m, code in mutations.items() if m != "WatchLoc")


def _tenor(root: str, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in child_env().items() if k != "TENOR_TOKEN"}
    return subprocess.run(
        [sys.executable, "-m", "tenor.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env={**base, "TENOR_ROOT": root, **(env or {})},
    )


def test_publish_without_the_token_is_one_line_and_exit_2(root, admin, tmp_path) -> None:
    # A root that says where the admin is but holds no token: a stranger's copy.
    stranger = tmp_path / "stranger"
    shutil.copytree(root[len("file://") :], stranger)
    (stranger / "tenor" / "test" / "token").unlink()
    publish = ("publish", MODEL, "test.TinyLlamaRandom", "None", "1", "--timeout", "10")
    for result in (_tenor(f"file://{stranger}", *publish), _tenor(root, *publish, env={"TENOR_TOKEN": "y" * 40})):
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("tenor: error: ") and result.stderr.count("\n") == 1
        assert "token" in result.stderr
    token_file = tmp_path / "token"
    token_file.write_text(cell_token(root) + "\n")
    ok = _tenor(f"file://{stranger}", *publish, "--token-file", str(token_file))
    assert ok.returncode == 0, ok.stderr
    listed = _tenor(root, "ls", CELL)
    assert listed.returncode == 0 and "lm" in listed.stdout


class _Engine(MockEngine):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__()


@contextlib.asynccontextmanager
async def _model_server(root: str, tls: TlsFiles | None = None):
    credentials = CellCredentials(tls=tls) if tls else CellCredentials()
    config = ModelServerConfig(cell=CELL, root=root, credentials=credentials)
    server = ModelServer(config, ModelTable(engine_factory=lambda *a: _Engine(), drain_timeout_s=0.5))
    await server.start(join=False)
    try:
        yield server
    finally:
        await server.stop()


async def _model_server_codes(channel, metadata) -> dict[str, grpc.StatusCode]:
    modelet, lm = modelet_pb2_grpc.ModeletStub(channel), lm_pb2_grpc.LMServiceStub(channel)
    calls = {
        "Load": lambda: modelet.Load(
            modelet_pb2.LoadRequest(model_name=MODEL, config_name="test.TinyLlamaRandom"), metadata=metadata, timeout=5
        ),
        "GetStatus": lambda: modelet.GetStatus(modelet_pb2.GetStatusRequest(), metadata=metadata, timeout=5),
        "UpdateLoaded": lambda: modelet.UpdateLoaded(
            modelet_pb2.UpdateLoadedRequest(model_name=MODEL), metadata=metadata, timeout=5
        ),
        "Unload": lambda: modelet.Unload(
            modelet_pb2.UnloadRequest(model_name="/tenor/test/none"), metadata=metadata, timeout=5
        ),
        "Generate": lambda: lm.Generate(
            lm_pb2.GenerateRequest(model_key=MODEL, text="abc"), metadata=metadata, timeout=5
        ),
        "Score": lambda: lm.Score(
            lm_pb2.ScoreRequest(model_key=MODEL, prefix="a", suffix=["b"]), metadata=metadata, timeout=5
        ),
    }
    codes = {}
    for name, call in calls.items():
        try:
            await call()
            codes[name] = grpc.StatusCode.OK
        except grpc.aio.AioRpcError as exc:
            codes[name] = exc.code()
    try:
        async for _ in lm.GenerateStream(
            lm_pb2.GenerateRequest(model_key=MODEL, text="abc"), metadata=metadata, timeout=5
        ):
            pass
        codes["GenerateStream"] = grpc.StatusCode.OK
    except grpc.aio.AioRpcError as exc:
        codes["GenerateStream"] = exc.code()
    return codes


def test_without_the_token_every_model_server_rpc_is_unauthenticated(tmp_path) -> None:
    root = f"file://{tmp_path}"

    async def body():
        async with _model_server(root) as server, grpc.aio.insecure_channel(server.address) as channel:
            refused = [await _model_server_codes(channel, m) for m in (None, WRONG)]
            allowed = await _model_server_codes(channel, bearer(root))
        return refused, allowed

    refused, allowed = asyncio.run(body())
    for codes in refused:
        assert len(codes) == 7 and set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}
    assert grpc.StatusCode.UNAUTHENTICATED not in allowed.values()
    assert allowed["Load"] == allowed["Generate"] == allowed["GenerateStream"] == grpc.StatusCode.OK


def test_with_tls_a_client_needs_the_ca_and_its_own_certificate(tmp_path) -> None:
    root = f"file://{tmp_path}"
    tls = make_tls(tmp_path / "tls")
    stranger_ca = make_tls(tmp_path / "other").ca

    async def status(credentials: CellCredentials, tokens: TokenSource, address: str) -> grpc.StatusCode:
        async with CellAccess(credentials, tokens).aio_channel(address) as channel:
            try:
                await modelet_pb2_grpc.ModeletStub(channel).GetStatus(modelet_pb2.GetStatusRequest(), timeout=3)
                return grpc.StatusCode.OK
            except grpc.aio.AioRpcError as exc:
                return exc.code()

    async def body():
        async with _model_server(root, tls) as server:
            tokens = TokenSource.fixed(TokenSet((cell_token(root),)), "test")
            plain = await status(CellCredentials(), tokens, server.address)
            no_ca = await status(CellCredentials(tls=TlsFiles(tls.cert, tls.key)), tokens, server.address)
            wrong_ca = await status(
                CellCredentials(tls=TlsFiles(tls.cert, tls.key, stranger_ca)), tokens, server.address
            )
            no_client_cert = await status(CellCredentials(tls=TlsFiles(ca=tls.ca)), tokens, server.address)
            full = await status(CellCredentials(tls=tls), tokens, server.address)
            no_token = await status(CellCredentials(tls=tls), TokenSource.fixed(TokenSet(), "none"), server.address)
        return plain, no_ca, wrong_ca, no_client_cert, full, no_token

    plain, no_ca, wrong_ca, no_client_cert, full, no_token = asyncio.run(body())
    assert plain == no_ca == wrong_ca == no_client_cert == grpc.StatusCode.UNAVAILABLE
    assert full == grpc.StatusCode.OK
    assert no_token == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tls-cert", "/nonexistent.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-ca", "/nonexistent.pem"], "cannot read the TLS CA /nonexistent.pem"),
        (["--token-file", "/nonexistent"], "cannot read the cell token from token file /nonexistent: No such file"),
    ],
)
def test_bad_credential_flags_are_one_line(tmp_path, capsys, flags, message) -> None:
    from tenor.cli.main import main

    code = main(
        ["publish", MODEL, "test.TinyLlamaRandom", "None", "1", "--root", str(tmp_path), "--timeout", "1", *flags]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("tenor: error: ") and err.count("\n") == 1
    assert message in err

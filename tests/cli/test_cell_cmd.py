"""`tenor publish/unpublish/update/ls/watch` against a real admin process and fake model servers."""

from __future__ import annotations

import pytest

from tenor.cli.main import main
from tests.fakes.cell import AdminProcess, wait_until
from tests.fakes.modelet import FakeModelServer

CELL = "/tenor/cli"
MODEL = "/tenor/cli/lm"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cell(tmp_path, monkeypatch):
    root = f"file://{tmp_path}"
    monkeypatch.setenv("TENOR_ROOT", root)
    with AdminProcess(root, CELL) as admin, FakeModelServer(root, CELL) as s1, FakeModelServer(root, CELL) as s2:
        admin.wait_leader()
        yield root, (s1, s2)


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory):
    """One admin for the tests that leave no state behind."""
    root = f"file://{tmp_path_factory.mktemp('cli')}"
    with AdminProcess(root, CELL) as admin:
        admin.wait_leader()
        yield root


def test_publish_ls_update_watch_unpublish(cell, capsys) -> None:
    root, servers = cell
    assert run(capsys, "publish", MODEL, "test.TinyLlamaRandom", "None", "2", "max_batch_size=4") == (0, "", "")
    wait_until(lambda: all(s.modelet.loads[MODEL] for s in servers), 10, "two loads")

    code, out, _ = run(capsys, "ls")
    assert code == 0 and "| 0 | /tenor/cli |" in out
    code, out, _ = run(capsys, "ls", CELL)
    assert code == 0 and "MODEL ID" in out and "| 0 | lm       |" in out

    def listed() -> str:
        _, text, _ = run(capsys, "ls", MODEL)
        return text if all(s.address in text for s in servers) else ""

    out = wait_until(listed, 10, "both replicas in ls")
    assert "| MODEL |      MODEL PATH      |" in out and "| lm    | test.TinyLlamaRandom | None            | 2 " in out

    assert run(capsys, "update", MODEL, "--replicas", "1", "--root", root)[0] == 0
    code, out, _ = run(capsys, "watch", MODEL, "--updates", "1")
    assert code == 0 and out.startswith("Reset\n+ 127.0.0.1:")
    assert run(capsys, "unpublish", MODEL)[0] == 0
    code, out, _ = run(capsys, "ls", CELL)
    assert code == 0 and "| 0 |" not in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["publish", MODEL, "test.Nope", "None", "1"], "unknown model config 'test.Nope'"),
        (["publish", "/tenor/cli", "test.TinyLlamaRandom", "None", "1"], "bad model name '/tenor/cli'"),
        (["publish", MODEL, "test.TinyLlamaRandom", "None", "-1"], "replica count must be >= 0, got -1"),
        (["publish", MODEL, "test.TinyLlamaRandom", "None", "two"], "replica count must be a whole number"),
        (["publish", MODEL, "test.TinyLlamaRandom", "None", "1", "oops"], "overrides must look like key=value"),
        (["publish", MODEL, "llama.SmolLM2_135M_Instruct", "None", "1", "dtype=int3"], "dtype must be one of"),
        (["update", MODEL], "nothing to update"),
        (["update", "/tenor/cli/absent", "--replicas", "1"], "model /tenor/cli/absent is not published"),
        (["unpublish", "/tenor/cli/absent"], "model /tenor/cli/absent is not published"),
        (["ls", "/tenor/cli/absent"], "model /tenor/cli/absent is not published"),
        (["ls", "/sax/cli"], "bad cell or model name"),
        (
            ["publish", MODEL, "test.TinyLlamaRandom", "None", "2", "prefill_replicas=1", "decode_replicas=1"],
            "prefill_replicas needs disaggregated=true",
        ),
        (
            [
                "publish",
                MODEL,
                "test.TinyLlamaRandom",
                "None",
                "0",
                "disaggregated=true",
                "prefill_replicas=-1",
                "decode_replicas=1",
            ],
            "prefill_replicas must be >= 1 with disaggregated=true, got -1",
        ),
        (
            [
                "publish",
                MODEL,
                "test.TinyLlamaRandom",
                "None",
                "2",
                "disaggregated=true",
                "prefill_replicas=1.5",
                "decode_replicas=1",
            ],
            "prefill_replicas must be a whole number >= 1, got '1.5'",
        ),
        (
            [
                "publish",
                MODEL,
                "test.TinyLlamaRandom",
                "None",
                "1",
                "disaggregated=true",
                "prefill_replicas=1",
                "decode_replicas=0",
            ],
            "decode_replicas must be >= 1",
        ),
        (
            [
                "publish",
                MODEL,
                "test.TinyLlamaRandom",
                "None",
                "3",
                "disaggregated=true",
                "prefill_replicas=1",
                "decode_replicas=1",
            ],
            "replica count 3 must equal prefill_replicas + decode_replicas (1 + 1 = 2)",
        ),
        (
            [
                "publish",
                MODEL,
                "test.LmSpmdRandom",
                "None",
                "2",
                "disaggregated=true",
                "prefill_replicas=1",
                "decode_replicas=1",
            ],
            "runs only on model-server groups of 2, which cannot move KV blocks",
        ),
        (["update", MODEL, "decode_replicas=x"], "decode_replicas must be a whole number >= 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(shared_root, capsys, argv, message) -> None:
    code, out, err = run(capsys, *argv, "--root", shared_root)
    assert code == 2 and out == ""
    assert err.startswith("tenor: error: ") and message in err and err.count("\n") == 1


def test_publish_disaggregated_and_ls_shows_roles(cell, capsys) -> None:
    root, servers = cell
    argv = [
        "publish",
        MODEL,
        "test.TinyLlamaRandom",
        "None",
        "2",
        "disaggregated=true",
        "prefill_replicas=1",
        "decode_replicas=1",
    ]
    assert run(capsys, *argv) == (0, "", "")

    def listed() -> str:
        _, text, _ = run(capsys, "ls", MODEL)
        return text if "2 replica(s)" not in text and all(s.address in text for s in servers) else ""

    out = wait_until(listed, 10, "both replicas serving in ls")
    roles = {s.modelet.models[MODEL].role: s.address for s in servers}
    assert set(roles) == {"prefill", "decode"}
    assert f"{roles['prefill']} (prefill)" in out and f"{roles['decode']} (decode)" in out
    code, out, _ = run(capsys, "watch", MODEL, "--updates", "1")  # clients see the decode replica only
    assert code == 0 and out == f"Reset\n+ {roles['decode']}\n"


def test_publishing_an_existing_name_fails(cell, capsys) -> None:
    assert run(capsys, "publish", MODEL, "test.TinyLlamaRandom", "None", "1")[0] == 0
    code, _, err = run(capsys, "publish", MODEL, "test.TinyLlamaRandom", "None", "1")
    assert code == 2 and "already published" in err


def test_no_root_is_a_clear_error(capsys, monkeypatch) -> None:
    monkeypatch.delenv("TENOR_ROOT", raising=False)
    code, _, err = run(capsys, "ls")
    assert code == 2 and "no cell root: pass --root" in err
    code, _, err = run(capsys, "ls", "--root", "s3://bucket")
    assert code == 2 and "unsupported cell root 's3://bucket'" in err

"""`tenor admin serve` refuses bad flags with one line and exit status 2."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tenor.cli.main import main
from tests.fakes.cell import REPO_ROOT


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--cell", "/tenor/a/b"], "bad cell name '/tenor/a/b': expected /tenor/<cell>"),
        (["--cell", "/tenor/a", "--root", "/nonexistent/dir"], "cell root /nonexistent/dir is not a directory"),
        (["--cell", "/tenor/a", "--root", "ftp://x"], "unsupported cell root 'ftp://x'"),
        (["--cell", "/tenor/a", "--poll-interval", "0"], "poll_interval_s must be > 0"),
        (["--cell", "/tenor/a", "--poll-interval", "2", "--prune-after", "1"], "prune_after_s (1.0) must be >="),
        (["--cell", "/tenor/a", "--port", "70000"], "port must be in 0..65535"),
        (["--cell", "/tenor/a", "--etcd-ttl", "0"], "--etcd-ttl must be >= 1"),
    ],
)
def test_bad_flags(tmp_path, capsys, extra, message) -> None:
    argv = ["admin", "serve", "--root", str(tmp_path), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tenor: error: ") and message in err and err.count("\n") == 1


def test_port_in_use(tmp_path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for flag in ("--port", "--http-port"):
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tenor.cli.main",
                    "admin",
                    "serve",
                    "--cell",
                    "/tenor/a",
                    "--root",
                    str(tmp_path),
                    flag,
                    str(port),
                ],
                capture_output=True,
                text=True,
                timeout=30,
                cwd=REPO_ROOT,
            )
            assert result.returncode == 2
            assert f"{port}" in result.stderr and "tenor: error: cannot" in result.stderr
            assert "Traceback" not in result.stderr


def test_readme_states_the_defaults_that_help_prints() -> None:
    import re

    from tenor.cli.main import build_parser

    readme = (REPO_ROOT / "README.md").read_text()
    serve = build_parser()._subparsers._group_actions[0].choices["admin"]._subparsers._group_actions[0].choices["serve"]
    defaults = {a.dest: a.default for a in serve._actions}
    stated = re.search(r"`--prune-after` seconds without a heartbeat\s+\(default (\d+(?:\.\d+)?);", readme)
    polled = re.search(r"`--poll-interval`, default (\d+(?:\.\d+)?)\)", readme)
    assert stated and float(stated.group(1)) == defaults["prune_after"]
    assert polled and float(polled.group(1)) == defaults["poll_interval"]

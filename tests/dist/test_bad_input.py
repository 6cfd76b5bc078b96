"""Bad group input from the command line: one-line errors, exit 2, nothing left running."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.fakes.cell import REPO_ROOT, child_env, free_port


def tenor(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tenor.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env=child_env(),
    )


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tenor.cli.main", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=child_env(),
    )


def assert_one_line_error(out: subprocess.CompletedProcess, *words: str) -> None:
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("tenor: error: ") and out.stderr.strip().count("\n") == 0, out.stderr
    for word in words:
        assert word in out.stderr


def test_group_size_that_does_not_divide_the_heads():
    out = tenor("generate", "--model", "test.TinyLlamaRandom", "--tensor-parallel", "3", "hi")
    assert_one_line_error(out, "group size 3", "2 KV heads")
    assert_one_line_error(tenor("generate", "--model", "test.TinyLlamaRandom", "-tp", "0", "hi"), "tensor-parallel")


def test_rank_out_of_range():
    out = tenor(
        "model-server",
        "serve",
        "--cell",
        "/tenor/x",
        "--group-size",
        "2",
        "--group-rank",
        "2",
        "--group-leader",
        "127.0.0.1:1234",
    )
    assert_one_line_error(out, "rank 2 is out of range")
    out = tenor("model-server", "serve", "--cell", "/tenor/x", "--group-size", "2", "--group-rank", "1")
    assert_one_line_error(out, "--group-leader")


def test_unreachable_leader():
    out = tenor(
        "model-server",
        "serve",
        "--cell",
        "/tenor/x",
        "--group-size",
        "2",
        "--group-rank",
        "1",
        "--group-leader",
        f"127.0.0.1:{free_port()}",
        "--group-join-timeout",
        "2",
    )
    assert_one_line_error(out, "could not join")


def test_two_ranks_with_the_same_index(tmp_path):
    port = free_port()
    group = [
        "--cell",
        "/tenor/x",
        "--root",
        f"file://{tmp_path}",
        "--group-size",
        "3",
        "--group-leader",
        f"127.0.0.1:{port}",
        "--group-join-timeout",
        "60",
    ]
    leader = start("model-server", "serve", *group, "--group-rank", "0")
    first = None
    try:
        time.sleep(3)  # the leader's store is up
        first = start("model-server", "serve", *group, "--group-rank", "1")
        time.sleep(2)
        out = tenor("model-server", "serve", *group, "--group-rank", "1")
        assert_one_line_error(out, "rank 1 is already taken")
        assert leader.poll() is None and first.poll() is None  # the rest of the group keeps waiting
    finally:
        for proc in (first, leader):
            if proc is not None:
                proc.kill()
                proc.wait(10)
